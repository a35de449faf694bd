"""A minimal, hand-written, SGLang-shaped tree for the tests (no SGLang source is copied).

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
        if len(self.disagg_prefill_inflight_queue) == 0:
            return []

        done_reqs = []
        polls = poll_and_all_reduce(
            [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue],
            self.attn_tp_cpu_group,
        )

        undone_reqs = []
        for req, poll in zip(self.disagg_prefill_inflight_queue, polls):
            if poll in [KVPoll.WaitingForInput, KVPoll.Transferring]:
                undone_reqs.append(req)
            elif poll == KVPoll.Success:
                done_reqs.append(req)
            elif poll == KVPoll.Failed:
'''

FAILED_RAISES = """\
                raise Exception("Transferring failed")
"""

FAILED_CLEANS_UP = """\
                done_reqs.append(req)
"""

PREFILL_TAIL = """\

        self.disagg_prefill_inflight_queue = undone_reqs
        return done_reqs
"""

CONN = '''\
"""KV connector interfaces (a hand-written test snippet)."""


class KVPoll:
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class BaseKVSender:
    def poll(self): ...

    def abort(self):
        pass


class FakeKVSender(BaseKVSender):
    def poll(self):
        return KVPoll.WaitingForInput
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


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file below ``root``: its bytes, mtime (ns) and mode, by relative path.

    Symlinks are recorded by their target, not followed."""
    found: dict[str, tuple[bytes, int, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = (str(path.readlink()).encode(), 0, 0)
        elif path.is_file():
            st = path.stat()
            found[rel] = (path.read_bytes(), st.st_mtime_ns, st.st_mode)
    return found
