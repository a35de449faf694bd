"""PDG008's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import PREFILL, Invalid
from pdguard.sglang_names import COMMON_CONN_PATH, DISAGGREGATION_DIR

_BASE = """\
class BaseKVSender:
    pass


class SharedKVSender(BaseKVSender):
    def abort(self):
        # remembered for poll(), which must report it
        self.conclude_state = KVPoll.Failed
        # own-words: an abort() that concludes Failed, and a mixin's class line: generic
"""

VALID = (
    # abort() concludes Failed, and poll() returns that first
    {
        PREFILL: """\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        finished = []
        waiting = []
        # each rank takes the branch the reduced state picks
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
""",
        COMMON_CONN_PATH: _BASE,
        f"{DISAGGREGATION_DIR}/quill/conn.py": """\
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedKVSender


class QuillKVSender(SharedKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.room = room
        self.conclude_state = None
        self.handles = []

    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        if not self.handles:
            return self.kv_mgr.check_status(self.room)
        return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
""",
    },
    # no deadline that aborts senders: nothing counts on abort()
    {
        COMMON_CONN_PATH: _BASE,
        f"{DISAGGREGATION_DIR}/quill/conn.py": """\
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedKVSender


class QuillKVSender(SharedKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.room = room
        self.handles = []

    def poll(self):
        if not self.handles:
            return self.kv_mgr.check_status(self.room)
        return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
""",
    },
)

INVALID = (
    # poll() never returns the state abort() concludes
    Invalid(
        {
            PREFILL: """\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        finished = []
        waiting = []
        # each rank takes the branch the reduced state picks
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
""",
            COMMON_CONN_PATH: _BASE,
            f"{DISAGGREGATION_DIR}/quill/conn.py": """\
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedKVSender


class QuillKVSender(SharedKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.room = room
        self.conclude_state = None
        self.handles = []

    def poll(self):
        if not self.handles:
            return self.kv_mgr.check_status(self.room)
        return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
""",
        },
        [
            (
                12,
                5,
                (
                    "QuillKVSender.poll() does not report Failed once abort() has run (it "
                    "never returns the state SharedKVSender.abort() concludes), and the "
                    "inflight deadline fails senders with abort() (line 21): its requests "
                    "can wait forever"
                ),
                f"{DISAGGREGATION_DIR}/quill/conn.py",
            ),
        ],
    ),
    # no abort() at all: the deadline's call raises
    Invalid(
        {
            PREFILL: """\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        finished = []
        waiting = []
        # each rank takes the branch the reduced state picks
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
""",
            COMMON_CONN_PATH: """\
class BaseKVSender:
    pass


class SharedKVSender(BaseKVSender):
    pass
""",
            f"{DISAGGREGATION_DIR}/quill/conn.py": """\
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedKVSender


class QuillKVSender(SharedKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.room = room
        self.conclude_state = None
        self.handles = []

    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        if not self.handles:
            return self.kv_mgr.check_status(self.room)
        return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
""",
        },
        [
            (
                12,
                5,
                (
                    "QuillKVSender.poll() does not report Failed once abort() has run (it "
                    "has no abort()), and the inflight deadline fails senders with abort() "
                    "(line 21): its requests can wait forever"
                ),
                f"{DISAGGREGATION_DIR}/quill/conn.py",
            ),
        ],
    ),
    # the deadline reads poll() first, and still aborts with abort() alone
    Invalid(
        {
            PREFILL: """\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                if req.disagg_kv_sender.poll() in (KVPoll.Success, KVPoll.Failed):
                    continue
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        finished = []
        waiting = []
        # each rank takes the branch the reduced state picks
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
""",
            COMMON_CONN_PATH: _BASE,
            f"{DISAGGREGATION_DIR}/quill/conn.py": """\
from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedKVSender


class QuillKVSender(SharedKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.room = room
        self.conclude_state = None
        self.handles = []

    def poll(self):
        if not self.handles:
            return self.kv_mgr.check_status(self.room)
        return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
""",
        },
        [
            (
                12,
                5,
                (
                    "QuillKVSender.poll() does not report Failed once abort() has run (it "
                    "never returns the state SharedKVSender.abort() concludes), and the "
                    "inflight deadline fails senders with abort() (line 21): its requests "
                    "can wait forever"
                ),
                f"{DISAGGREGATION_DIR}/quill/conn.py",
            ),
        ],
    ),
)
