"""PDG001's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid

VALID = (
    # stamped at entry, failed through the sender before the all-reduce
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
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
    # the same deadline inline, with other names (now read on the stamp's clock)
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

    def process_disagg_prefill_inflight_queue(self):
        deadline_now = time.monotonic()
        for pending in self.disagg_prefill_inflight_queue:
            waited = deadline_now - pending.entered_at
            if waited >= TIMEOUT:
                sender = pending.disagg_kv_sender
                sender.abort()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
)

INVALID = (
    # no deadline at all
    Invalid(
        """\
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            self.disagg_prefill_inflight_queue.append(req)

    def process_disagg_prefill_inflight_queue(self):
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                14,
                17,
                (
                    "request kept in the inflight queue with no deadline when poll is "
                    "WaitingForInput/Transferring: nothing fails a request that waits too "
                    "long"
                ),
            ),
        ],
    ),
    # enforced, never stamped
    Invalid(
        """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            self.disagg_prefill_inflight_queue.append(req)

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
                25,
                17,
                (
                    "request kept in the inflight queue with no deadline when poll is "
                    "WaitingForInput/Transferring: requests are not stamped where they "
                    "enter disagg_prefill_inflight_queue"
                ),
            ),
        ],
    ),
    # helper defined but not called
    Invalid(
        """\
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce


class SchedulerDisaggregationPrefillMixin:

    def process_disagg_prefill_inflight_queue(self):
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                11,
                17,
                (
                    "request kept in the inflight queue with no deadline when poll is "
                    "WaitingForInput/Transferring: nothing fails a request that waits too "
                    "long"
                ),
            ),
        ],
    ),
    # not on every call
    Invalid(
        """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce


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
        if self.tp_rank == 0:
            self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                26,
                17,
                (
                    "request kept in the inflight queue with no deadline when poll is "
                    "WaitingForInput/Transferring: the deadline does not run before the "
                    "poll all-reduce on every call"
                ),
            ),
        ],
    ),
    # PP: the deadline skipped whenever the stages' consensus is given
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
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self, consensus):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if consensus is not None:
                continue  # left to the stages' consensus
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight(consensus=rids_to_check)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                29,
                17,
                (
                    "request kept in the inflight queue with no deadline when poll is "
                    "WaitingForInput/Transferring: the deadline is skipped when "
                    "rids_to_check is given, and every PP stage gives it: under pipeline "
                    "parallelism a transfer that never ends keeps its request on every "
                    "stage"
                ),
            ),
        ],
    ),
)
