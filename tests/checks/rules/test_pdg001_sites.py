"""PDG001 says which poll state or branch keeps each reported request (the enclosing
``if``/``elif`` tests of the keep site), so that its findings are not one message repeated."""

from __future__ import annotations

import pytest

from pdguard.checks.project import Project
from pdguard.checks.rule import PREFILL
from pdguard.checks.rules.pdg001_inflight_wait_forever import InflightWaitForever
from pdguard.commands.check import check_tree
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release

RULE = InflightWaitForever()


@pytest.mark.parametrize("n", range(len(RULE.INVALID)))
def test_invalid_examples_name_their_keep_site(n: int) -> None:
    example = RULE.INVALID[n]
    findings = list(RULE.check(Project({PREFILL: example.code})))  # type: ignore[dict-item]  # PDG001's examples are prefill.py strings
    assert findings
    for finding in findings:
        assert finding.message.startswith(f"{RULE.MESSAGE} {RULE.EXAMPLE_SITE}: "), finding


SNIPPET = """\
class SchedulerDisaggregationPrefillMixin:
    def process_disagg_prefill_inflight_queue(self, rids_to_check=None):
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.stage_group)
        carry_over, released = [], []
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
            if rids_to_check is not None:
                # under PP, only what every stage reported may leave
                if req.rid not in rids_to_check:
                    carry_over.append(req)
                    continue
            if req.pending_bootstrap:
                # parked: prefill done, the bootstrap still running
                if state == KVPoll.Bootstrapping:
                    carry_over.append(req)
                continue
            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
                carry_over.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                released.append(req)
            else:
                carry_over.append(req)
        self.disagg_prefill_inflight_queue = carry_over
"""


def test_every_keep_site_says_which_branch_keeps_the_request() -> None:
    messages = [f.message for f in RULE.check(Project({PREFILL: SNIPPET}))]
    sites = [m.removeprefix(RULE.MESSAGE + " ").split(": ")[0] for m in messages]
    assert sites == [
        "when not in the PP consensus (rids_to_check)",
        "while parked pending_bootstrap, when poll is Bootstrapping",
        "when poll is WaitingForInput/Transferring",
        "in the else branch (any other poll state)",
    ]


@pytest.mark.releases
def test_a_release_reports_distinct_keep_sites() -> None:
    result = check_tree(open_tree(fetch_release("0.5.23")), ["PDG001"])
    messages = [f.message for f in result.findings]
    assert len(messages) == 5 and len(set(messages)) == 5
    assert all(m.startswith(RULE.MESSAGE) for m in messages)
    assert any("when poll is WaitingForInput/Transferring" in m for m in messages)
    assert any("not in the PP consensus (rids_to_check)" in m for m in messages)
    assert any("parked pending_bootstrap" in m for m in messages)
