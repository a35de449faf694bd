"""PDG000's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid
from pdguard.sglang_names import BASE_CONN_PATH, DISAGGREGATION_DIR

# a fork sender whose state lives in an object pdguard knows nothing of
_OPAQUE_SENDER = """\
from sglang.srt.disaggregation.base.conn import BaseKVSender


class LarkKVSender(BaseKVSender):
    def poll(self):
        self.polled = True
        return self.machine.current()
"""

VALID = (
    # the deadline as pdguard writes it: everything modelled
    """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

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
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
)

INVALID = (
    # the inflight function renamed: nothing to model
    Invalid(
        """\
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:

    def process_inflight_transfers(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
""",
        [
            (
                7,
                1,
                (
                    "no process_disagg_prefill_inflight_queue() in prefill.py (renamed or "
                    "split?): pdguard cannot model the inflight queue, so nothing proves "
                    "that its requests are bounded"
                ),
            ),
        ],
    ),
    # the queue bound to another name before the append
    Invalid(
        """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            queue = self.disagg_prefill_inflight_queue

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                14,
                21,
                (
                    "disagg_prefill_inflight_queue is bound to another name here: pdguard "
                    "cannot follow requests that enter the queue through it"
                ),
            ),
        ],
    ),
    # a sender whose poll() returns what pdguard cannot trace
    Invalid(
        {
            BASE_CONN_PATH: """\
class BaseKVSender:
    def poll(self): ...
""",
            f"{DISAGGREGATION_DIR}/lark/conn.py": _OPAQUE_SENDER,
        },
        [
            (
                7,
                9,
                (
                    "LarkKVSender.poll() returns `self.machine.current()`, which pdguard "
                    "cannot trace to poll states: it cannot tell whether this sender can "
                    "report Bootstrapping, so nothing proves that its bootstrap is bounded "
                    "(PDG004)"
                ),
                f"{DISAGGREGATION_DIR}/lark/conn.py",
            ),
        ],
    ),
)
