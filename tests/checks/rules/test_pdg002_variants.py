"""PDG002 on two more variants of its documented examples (checks/rule_examples/pdg002.py
keeps one of each pair): the PP skip written as one condition, and the per-rank ``poll`` set
on a sender that ignores ``abort()``."""

from __future__ import annotations

import pytest

from pdguard.checks.project import Project
from pdguard.checks.rule import PREFILL, Invalid
from pdguard.checks.rules.pdg002_deadline_per_rank import DeadlinePerRank
from pdguard.sglang_names import BASE_CONN_PATH

VALID = (
    # PP: the same, as one condition that skips a transfer this stage polls as ended
    """\
import time

from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
            self.disagg_prefill_inflight_queue.append(req)

    def _expire_inflight(self, agreed):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            ended = req.disagg_kv_sender.poll()
            if agreed is not None and (ended == KVPoll.Success or ended == KVPoll.Failed):
                continue
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()

    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        self._expire_inflight(rids_to_check)
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
                waiting.append(req)
        self.disagg_prefill_inflight_queue = waiting
""",
)

INVALID = (
    # the same, with a sender whose poll() ignores abort()
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
            BASE_CONN_PATH: """\
class BaseKVSender:
    def abort(self):
        self.conclude_state = KVPoll.Failed


class SpoolKVSender(BaseKVSender):
    def poll(self):
        if not self.transfers:
            return self.kv_mgr.check_status(self.room)
""",
        },
        [
            (
                20,
                17,
                (
                    "inflight deadline sets `poll` on a sender instance, skipping poll()'s "
                    "own bookkeeping: make SpoolKVSender.poll() report Failed once aborted "
                    "(the sender-abort fix) and call abort()"
                ),
            ),
        ],
    ),
)


def _project(example: object) -> Project:
    return Project({PREFILL: example} if isinstance(example, str) else example)  # type: ignore[dict-item]


@pytest.mark.parametrize("example", VALID)
def test_the_valid_variant_has_no_finding(example: object) -> None:
    assert list(DeadlinePerRank().check(_project(example))) == []


@pytest.mark.parametrize("example", INVALID)
def test_the_invalid_variant_gives_exactly_its_findings(example: Invalid) -> None:
    findings = list(DeadlinePerRank().check(_project(example.code)))
    assert sorted((f.path, f.line, f.col, f.message) for f in findings) == sorted(
        (e.path, e.line, e.col, e.message) for e in example.expected
    )
