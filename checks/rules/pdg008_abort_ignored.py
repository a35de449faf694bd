"""PDG008: the inflight deadline aborts a KV sender whose poll() does not report Failed then.

What it does
    Where the inflight deadline fails overdue senders with ``abort()`` (before the poll
    all-reduce), reports every concrete ``BaseKVSender`` subclass (resolved through inheritance
    across files) whose ``poll()`` does not report Failed once ``abort()`` has run: it has no
    ``abort()`` at all, or its ``abort()`` concludes a Failed state (or a Failed room status)
    that ``poll()`` never returns (``checks/models/kv_senders.py``, ``abort_honoured``).

Why is this bad
    The deadline counts on the MIN-reduced poll being Failed on every rank in the step it
    aborts the sender: only then does the release's own Failed branch end the request on all
    of them. An ``abort()`` that ``poll()`` ignores (NIXL up to 0.5.11 reads its transfer
    handles once it has sent) leaves the overdue request waiting, with no bound; a sender
    without ``abort()`` makes the call raise. The fix belongs in the sender's class (pdguard's
    ``sender-abort``), not in a ``poll`` replaced on the instance (PDG002).

Example
    ``abort()`` concludes a Failed state that ``poll()`` never returns (NIXL up to 0.5.11
    reads its transfer handles once it has sent):

    ```python
    class QuillKVSender(SharedKVSender):
        ...

        def poll(self):
            if not self.handles:
                return self.kv_mgr.check_status(self.room)
            return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
    ```

Use instead
    Return the concluded state first (``sender-abort`` writes this, as 0.5.12+ does):

    ```python
    class QuillKVSender(SharedKVSender):
        ...

        def poll(self):
            if self.conclude_state is not None:
                return self.conclude_state
            if not self.handles:
                return self.kv_mgr.check_status(self.room)
            return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.sglang_names import COMMON_CONN_PATH, DISAGGREGATION_DIR

from ..project import Project
from ..rule import PREFILL, Finding, Invalid, Rule

_BASE = """\
class BaseKVSender:
    pass


class SharedKVSender(BaseKVSender):
    def abort(self):
        # remembered for poll(), which must report it
        self.conclude_state = KVPoll.Failed
"""
# What a deadline may call on a sender besides abort() without failing it another way:
# record_failure adds a reason, poll() reads the state (PP: is the transfer still unfinished).
ABORT_ONLY = frozenset({"abort", "record_failure", "poll"})


class AbortIgnored(Rule):
    code = "PDG008"
    name = "abort-ignored"
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

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        # deadlines that fail senders with abort() alone (record_failure only adds a reason;
        # a poll set on the instance, which PDG002 reports, or another call may fail it)
        aborting = [
            c
            for c in model.checks
            if c.each_step
            and c.fails_sender
            and c.poll_set_at is None
            and "abort" in c.sender_calls
            and c.sender_calls <= ABORT_ONLY
        ]
        if not aborting:
            return
        index = project.classes
        for name in index.senders():
            if not index.is_concrete(name) or index.abort_honoured(name):
                continue
            if index.opaque_poll(name) is not None:
                continue  # PDG000: pdguard cannot read what poll() does
            owner = index.resolve(name, "poll")
            abort_owner = index.resolve(name, "abort")
            if owner is None:
                continue
            poll = owner.methods["poll"]
            marks = index.abort_marks(name)
            if abort_owner is None:
                why = "it has no abort()"
            elif index.abort_concludes(name) or not marks:
                why = f"it never returns the state {abort_owner.name}.abort() concludes"
            else:
                # abort() marks the sender some other way (``self.cancelled = True``)
                set_ = ", ".join(f"self.{m}" for m in marks)
                why = (
                    f"its first statement does not return Failed once {abort_owner.name}."
                    f"abort() has set {set_}"
                )
            yield self.finding(
                owner.rel,
                poll.lineno,
                poll.col_offset + 1,
                f"{name}.poll",
                f"{name}.poll() does not report Failed once abort() has run ({why}), and the "
                f"inflight deadline fails senders with abort() (line {aborting[0].line}): its "
                "requests can wait forever",
            )
