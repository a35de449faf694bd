"""Hand-written, SGLang-shaped code for the tests (no SGLang source is copied).

The rules' own VALID/INVALID examples are literal code in each rule's class; the LibCST
codemod tests keep their before/after pairs inline, next to what they assert.

``make_tree`` writes ``sglang/srt/disaggregation/prefill.py``, ``.../base/conn.py`` and
``sglang/version.py``: just enough for the ``inflight-deadline`` fix to apply, and for the
``sender-bootstrap-timeout`` fix to find one KV sender that never reports Bootstrapping
(so it is ``not-applicable``). Everything is black-formatted and isort-clean (profile black,
``known_first_party=sglang``).
"""

from __future__ import annotations

from pathlib import Path

PREFILL_REL = "sglang/srt/disaggregation/prefill.py"
CONN_REL = "sglang/srt/disaggregation/base/conn.py"
VERSION_REL = "sglang/version.py"
VERSION = "0.0.1-test"

PREFILL_HEAD = '''\
"""Prefill side of PD disaggregation (a hand-written test snippet)."""

from __future__ import annotations

import logging
from typing import List

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            self.disagg_prefill_inflight_queue.append(req)

    def process_disagg_prefill_inflight_queue(self) -> List:
        if not self.disagg_prefill_inflight_queue:
            return []

        handed_off = []
        senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)

        pending = []
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state == KVPoll.Success:
                handed_off.append(req)
            elif state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                pending.append(req)
            elif state == KVPoll.Failed:
'''

FAILED_RAISES = """\
                raise Exception("Transferring failed")
"""

FAILED_CLEANS_UP = """\
                handed_off.append(req)
"""

PREFILL_TAIL = """\

        self.disagg_prefill_inflight_queue = pending
        return handed_off
"""

CONN = '''\
"""KV connector interfaces (a hand-written test snippet)."""


class KVPoll:
    # the all-reduce keeps the lowest: one rank's Failed fails the request on every rank
    Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


class BaseKVSender:
    conclude_state = None

    def poll(self): ...

    def abort(self):
        self.conclude_state = KVPoll.Failed


class LoopbackKVSender(BaseKVSender):
    """Never bootstraps: it waits for its KV indices, then transfers until aborted."""

    sent = False

    def send(self, kv_indices):
        self.sent = True

    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        return KVPoll.Transferring if self.sent else KVPoll.WaitingForInput
'''

VERSION_PY = f'__version__ = "{VERSION}"\n'


def prefill_text(*, failed_branch_raises: bool = False) -> str:
    """The prefill.py text, with ``\\n`` line endings."""
    branch = FAILED_RAISES if failed_branch_raises else FAILED_CLEANS_UP
    return PREFILL_HEAD + branch + PREFILL_TAIL


def encode_source(
    text: str, *, newline: str = "\n", bom: bool = False, encoding_cookie: str | None = None
) -> bytes:
    """``text`` (``\\n`` endings) as file bytes: ``newline`` endings, a BOM, a coding cookie."""
    if encoding_cookie is not None:
        text = f"# -*- coding: {encoding_cookie} -*-\n" + text
    data = text.replace("\n", newline)
    if bom:
        return data.encode("utf-8-sig")
    return data.encode(encoding_cookie or "utf-8")


def make_tree(
    root: Path,
    *,
    failed_branch_raises: bool = False,
    newline: str = "\n",
    bom: bool = False,
    encoding_cookie: str | None = None,
) -> Path:
    """Write the tree under ``root`` (created if needed) and return ``root``."""
    files = {
        PREFILL_REL: prefill_text(failed_branch_raises=failed_branch_raises),
        CONN_REL: CONN,
        VERSION_REL: VERSION_PY,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            encode_source(text, newline=newline, bom=bom, encoding_cookie=encoding_cookie)
        )
    return root


# -- keep sites: where make_tree's inflight loop keeps a request for another step --------------

KEEP = "pending.append(req)"
# A second keep site: requests in an unexpected poll state are kept too.
SECOND_KEEP = """\
                handed_off.append(req)
            else:
                pending.append(req)
"""


def keep_sites(root: Path) -> list[tuple[int, int]]:
    """(line, col) of every keep site in the tree's prefill.py, 1-based."""
    lines = (root / PREFILL_REL).read_text().splitlines()
    return [(n, line.index(KEEP) + 1) for n, line in enumerate(lines, 1) if KEEP in line]


def add_second_keep_site(root: Path) -> Path:
    prefill = root / PREFILL_REL
    text = prefill.read_text()
    assert text.count("                handed_off.append(req)\n") == 2
    head, _, tail = text.rpartition("                handed_off.append(req)\n")
    prefill.write_text(head + SECOND_KEEP + tail)
    assert len(keep_sites(root)) == 2
    return root


# -- KV sender hierarchies (indented: ``textwrap.dedent`` them), as in
# tests/fixes/test_sender_bootstrap_timeout.py --

# base/conn.py: KVPoll and BaseKVSender.
SENDER_BASE = """
    class KVPoll:
        Failed = 0
        Bootstrapping = 1
        WaitingForInput = 2


    class BaseKVSender:
        def poll(self): ...
"""

SENDER_COMMON = """
    import time

    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class CommonKVManager:
        def __init__(self):
            self.bootstrap_timeout = envs.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT.get()

        def record_failure(self, room, reason): ...


    class CommonKVSender(BaseKVSender):
        def __init__(self, mgr: CommonKVManager, room):
            self.kv_mgr = mgr
            self.init_time = None
            self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

        def _check_bootstrap_timeout(self):
            if self.init_time is None:
                return None
            if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                return KVPoll.Failed
            return None
"""

# A NIXL sender as in 0.5.13 - 0.5.17: init_time stays None, poll never checks.
NIXL_BROKEN = """
    import time

    from sglang.srt.disaggregation.common.conn import CommonKVManager, CommonKVSender, KVPoll


    class NixlKVManager(CommonKVManager):
        pass


    class NixlKVSender(CommonKVSender):
        def __init__(self, mgr: NixlKVManager, room):
            super().__init__(mgr, room)
            self.has_sent = False

        def poll(self):
            status = self.kv_mgr.check_status(self.bootstrap_room)
            return status
"""

# As in 0.5.22: the check sits in a helper that poll() calls.
NIXL_VIA_HELPER = """
    import time

    from sglang.srt.disaggregation.common.conn import CommonKVManager, CommonKVSender, KVPoll


    class NixlKVSender(CommonKVSender):
        def __init__(self, mgr: CommonKVManager, room):
            super().__init__(mgr, room)
            self.init_time = time.time()

        def poll(self):
            return self._status_within_deadline(self.kv_mgr.check_status)

        def _status_within_deadline(self, read_status):
            current = read_status(self.bootstrap_room)
            if current != KVPoll.Bootstrapping:
                return current
            return self._check_bootstrap_timeout() or current
"""

# A sender that never reports Bootstrapping (like NIXL in 0.4.6).
NIXL_NEVER_BOOTSTRAPS = """
    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class NixlKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.transferred = False

        def poll(self):
            return KVPoll.Success if self.transferred else KVPoll.WaitingForInput
"""


# -- the toy prefill module of the simulate tests ----------------------------------------------

# ``pdguard simulate`` loads the scheduler code it needs from prefill.py: the bootstrap queue's
# sender creation, the append site, the inflight queue's poll.
TOY_PREFILL = '''\
"""A toy prefill module in the shape pdguard expects (not SGLang's code)."""

from __future__ import annotations

import logging

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import (
    KVClassType,
    get_kv_class,
    poll_and_all_reduce,
    prepare_abort,
)
from sglang.srt.managers.schedule_batch import FINISH_LENGTH

logger = logging.getLogger(__name__)


class PrefillBootstrapQueue:
    def add(self, req):
        sender_class = get_kv_class(self.transfer_backend, KVClassType.SENDER)
        req.disagg_kv_sender = sender_class(
            mgr=self.kv_manager, bootstrap_addr="toy", bootstrap_room=req.bootstrap_room
        )
        self.queue.append(req)

    def pop_bootstrapped(self):
        if not self.queue:
            return []
        polls = poll_and_all_reduce(
            [r.disagg_kv_sender for r in self.queue], self.gloo_group
        )
        ready = [r for r, p in zip(self.queue, polls) if p == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch, result):
        for req in batch.reqs:
            self.tree_cache.cache_unfinished_req(req)
            self.send_kv_chunk(req, True)
            self.disagg_prefill_inflight_queue.append(req)

    def process_disagg_prefill_inflight_queue(self):
        senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
        polls = poll_and_all_reduce(
            senders,
            self.attn_tp_cpu_group,
        )
        undone, done = [], []
        for req, poll in zip(self.disagg_prefill_inflight_queue, polls):
            if poll not in (KVPoll.Success, KVPoll.Failed):
                undone.append(req)
                continue
            self.tree_cache.cache_finished_req(req)
            if poll == KVPoll.Failed:
                prepare_abort(req, "KV transfer to the decode side failed")
            else:
                req.finished_reason = FINISH_LENGTH(length=0)
            done.append(req)
        self.stream_output(done, False)
        self.disagg_prefill_inflight_queue = undone

    def send_kv_chunk(self, req, last_chunk=False):
        raise NotImplementedError  # the KV data path: replaced by the simulated scheduler
'''


def make_toy(root: Path, text: str = TOY_PREFILL) -> Path:
    """A tree at ``root`` (created) holding only ``text`` as its prefill.py; returns ``root``."""
    (root / PREFILL_REL).parent.mkdir(parents=True)
    (root / PREFILL_REL).write_text(text)
    return root


# -- a toy prefill.py whose inflight function takes the PP consensus ----------------------------

# The holes: {stamp} (at the entry), {helper} (a method), {call} (before the poll all-reduce).
# Only the names the inflight model keys on are SGLang's (tests/checks/test_unseen_prefill.py,
# tests/fixes/test_inflight_deadline_pp.py).
TOY_PP_PREFILL = """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

LIMIT_S = 120.0


class ToyPrefill:
    def hand_over(self, finished):
        for req in finished:
{stamp}            self.disagg_prefill_inflight_queue.append(req)
{helper}
    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
{call}        states = poll_and_all_reduce(
            [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue],
            self.poll_group,
        )
        waiting, finished = [], []
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
            else:
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
"""
