"""PDG009's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid

VALID = (
    # a toy prefill side the simulation can run (a bootstrap queue, the inflight queue's entry,
    # the inflight function; not SGLang's code): the deadline runs before the poll all-reduce
    """\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import (
    KVClassType,
    get_kv_class,
    poll_and_all_reduce,
    prepare_abort,
)
from sglang.srt.managers.schedule_batch import FINISH_LENGTH

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


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
        polls = poll_and_all_reduce([r.disagg_kv_sender for r in self.queue], self.gloo_group)
        ready = [r for r, p in zip(self.queue, polls) if p == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch, result):
        for req in batch.reqs:
            self.tree_cache.cache_unfinished_req(req)
            self.send_kv_chunk(req, True)
            req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at <= TIMEOUT:
                continue
            if req.disagg_kv_sender.poll() in (KVPoll.Success, KVPoll.Failed):
                continue  # ended on this rank: the reduced poll decides, never a failed success
            req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        self._expire_inflight()
        senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
        polls = poll_and_all_reduce(senders, self.attn_tp_cpu_group)
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
        raise NotImplementedError
""",
)

INVALID = (
    # the same toy with the deadline after the all-reduce: PDG001 says unbounded, the
    # simulation bounds every request (the next step's deadline fails them)
    Invalid(
        expected=[
            (
                51,
                5,
                "the static rules and the simulation disagree on the prefill side: PDG001 "
                "(line 58) says request kept in the inflight queue with no deadline when "
                "poll is not Success/Failed: the deadline does not run before the poll "
                "all-reduce on every call; the simulation ran the tree's own code and its 7 "
                "prefill scenario(s) pass (wedge: failed at 301.5 s (deadline 301.1 s) on "
                "every rank in the same step: client error, KV released, queues empty)",
            )
        ],
        code="""\
import logging
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import (
    KVClassType,
    get_kv_class,
    poll_and_all_reduce,
    prepare_abort,
)
from sglang.srt.managers.schedule_batch import FINISH_LENGTH

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


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
        polls = poll_and_all_reduce([r.disagg_kv_sender for r in self.queue], self.gloo_group)
        ready = [r for r, p in zip(self.queue, polls) if p == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch, result):
        for req in batch.reqs:
            self.tree_cache.cache_unfinished_req(req)
            self.send_kv_chunk(req, True)
            req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at <= TIMEOUT:
                continue
            if req.disagg_kv_sender.poll() in (KVPoll.Success, KVPoll.Failed):
                continue  # ended on this rank: the reduced poll decides, never a failed success
            req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self):
        senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
        polls = poll_and_all_reduce(senders, self.attn_tp_cpu_group)
        self._expire_inflight()
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
        raise NotImplementedError
""",
    ),
)
