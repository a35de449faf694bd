"""PDG005's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid

VALID = (
    # `time` imported at module level
    """\
import logging
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
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
    # an aliased import of the module itself
    """\
import time as time

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
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
)

INVALID = (
    # `time` used, never imported
    Invalid(
        """\
import logging

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
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (13, 34, "`time` is used but not imported (NameError when this runs)"),
            (17, 15, "`time` is used but not imported (NameError when this runs)"),
        ],
    ),
    # imported only under TYPE_CHECKING
    Invalid(
        """\
import logging

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
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (13, 34, "`time` is used but not imported (NameError when this runs)"),
            (17, 15, "`time` is used but not imported (NameError when this runs)"),
        ],
    ),
)
