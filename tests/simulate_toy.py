"""A hand-written toy prefill module in the shape pdguard expects (not SGLang's code), for the
simulate tests that run without the network."""

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
        polls = poll_and_all_reduce([r.disagg_kv_sender for r in self.queue], self.gloo_group)
        ready = [r for r, p in zip(self.queue, polls) if p == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch, result):
        for req in batch.reqs:
            self.tree_cache.cache_unfinished_req(req)
            self.disagg_prefill_inflight_queue.append(req)
            self.send_kv_chunk(req, last_chunk=True)

    def process_disagg_prefill_inflight_queue(self):
        polls = poll_and_all_reduce(
            [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue],
            self.attn_tp_cpu_group,
        )
        undone, done = [], []
        for req, poll in zip(self.disagg_prefill_inflight_queue, polls):
            if poll in (KVPoll.WaitingForInput, KVPoll.Transferring):
                undone.append(req)
            elif poll == KVPoll.Success:
                self.tree_cache.cache_finished_req(req)
                req.finished_reason = FINISH_LENGTH(length=0)
                done.append(req)
            elif poll == KVPoll.Failed:
                self.tree_cache.cache_finished_req(req)
                prepare_abort(req, "transfer failed")
                done.append(req)
        self.stream_output(done, False)
        self.disagg_prefill_inflight_queue = undone

    def send_kv_chunk(self, req, last_chunk=False):
        raise NotImplementedError  # the KV data path: replaced by the simulated scheduler
'''
