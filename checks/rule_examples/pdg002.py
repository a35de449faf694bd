"""PDG002's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import PREFILL, Invalid
from pdguard.sglang_names import BASE_CONN_PATH

# Senders that all report Failed once aborted; then one more whose poll() never looks.
HONOURING_SENDERS = """\
class BaseKVSender:
    def abort(self):
        # an aborted sender answers Failed from then on
        self.conclude_state = KVPoll.Failed


class LedgerKVSender(BaseKVSender):
    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        return self.kv_mgr.check_status(self.room)
"""

VALID = (
    # abort() before the poll all-reduce: the MIN makes it unanimous
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
    # abort() where every sender honours it
    {
        PREFILL: """\
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
        BASE_CONN_PATH: HONOURING_SENDERS,
    },
    # PP: only a transfer this stage still polls as unfinished is failed
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

    def _expire_inflight(self, agreed):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at <= TIMEOUT:
                continue
            state = req.disagg_kv_sender.poll()
            if state not in (KVPoll.Success, KVPoll.Failed):
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight(rids_to_check)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
)

INVALID = (
    # the deadline decided after the all-reduce, per rank
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

    def process_disagg_prefill_inflight_queue(self):
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if time.monotonic() - req.entered_at > TIMEOUT:
                state = KVPoll.Failed
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                17,
                16,
                (
                    "inflight deadline decided after the poll all-reduce: ranks can "
                    "disagree; fail the request's sender before the all-reduce"
                ),
            ),
        ],
    ),
    # the request dropped from this rank's queue, its sender never failed
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

    def process_disagg_prefill_inflight_queue(self):
        for req in list(self.disagg_prefill_inflight_queue):
            if time.monotonic() - req.entered_at > TIMEOUT:
                self.disagg_prefill_inflight_queue.remove(req)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                18,
                16,
                (
                    "inflight deadline does not fail the request's sender: the reduced poll "
                    "will not say Failed on every rank"
                ),
            ),
        ],
    ),
    # `poll` set on the sender instance, where abort() would do
    Invalid(
        {
            PREFILL: """\
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
                req.disagg_kv_sender.poll = lambda: KVPoll.Failed

    def process_disagg_prefill_inflight_queue(self):
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
            BASE_CONN_PATH: HONOURING_SENDERS,
        },
        [
            (
                20,
                17,
                (
                    "inflight deadline sets `poll` on a sender instance, skipping poll()'s "
                    "own bookkeeping: every sender here reports Failed once aborted; call "
                    "abort()"
                ),
            ),
        ],
    ),
    # PP: spares only what the consensus already carries
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

    def _expire_inflight(self, agreed):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight(rids_to_check)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                19,
                16,
                (
                    "inflight deadline can fail a request this PP stage already polls as "
                    "transferred: the stages' consensus (rids_to_check) ends it with "
                    "success elsewhere; leave requests whose sender's poll() says Success "
                    "to it"
                ),
            ),
        ],
    ),
    # PP: no look at this stage's own poll at all
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

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight(rids_to_check)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
        [
            (
                19,
                16,
                (
                    "inflight deadline can fail a request this PP stage already polls as "
                    "transferred: the stages' consensus (rids_to_check) ends it with "
                    "success elsewhere; leave requests whose sender's poll() says Success "
                    "to it"
                ),
            ),
        ],
    ),
)
