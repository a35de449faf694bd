"""PDG003 on one more variant of its documented examples (checks/rule_examples/pdg003.py keeps
the invalid one, every parked request skipped): under PP, a parked request is not counted only
while its sender still polls Bootstrapping, which the bootstrap timeout bounds."""

from __future__ import annotations

from pdguard.checks.project import Project
from pdguard.checks.rule import PREFILL
from pdguard.checks.rules.pdg003_deadline_clock import DeadlineClock

# under PP, parked requests not counted while their sender bootstraps
PARKED_WHILE_BOOTSTRAPPING = """\
import time
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
            req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            sender = req.disagg_kv_sender
            if req.pending_bootstrap and sender.poll() == KVPoll.Bootstrapping:
                req.entered_at = now
                continue
            if now - req.entered_at > TIMEOUT:
                sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight()
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if rids_to_check is not None and req.rid not in rids_to_check:
                waiting.append(req)
                continue
            if req.pending_bootstrap:
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
"""


def test_a_parked_request_skipped_only_while_bootstrapping_has_no_finding() -> None:
    project = Project({PREFILL: PARKED_WHILE_BOOTSTRAPPING})
    assert list(DeadlineClock().check(project)) == []


def test_skipping_every_parked_request_is_the_finding() -> None:
    skip_all = PARKED_WHILE_BOOTSTRAPPING.replace(
        "req.pending_bootstrap and sender.poll() == KVPoll.Bootstrapping", "req.pending_bootstrap"
    )
    assert skip_all != PARKED_WHILE_BOOTSTRAPPING
    (finding,) = DeadlineClock().check(Project({PREFILL: skip_all}))
    assert "skips every parked request" in finding.message
