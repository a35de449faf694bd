"""PDG001 says which poll state or branch keeps each reported request (the enclosing
``if``/``elif`` tests of the keep site), so that its findings are not one message repeated."""

from __future__ import annotations

import pytest

from pdguard.checks.model import PREFILL
from pdguard.checks.pdg001_inflight_wait_forever import InflightWaitForever
from pdguard.checks.project import Project
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
        done_reqs, undone_reqs = [], []
        polls = poll_and_all_reduce(
            [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue], self.gloo
        )
        for req, poll in zip(self.disagg_prefill_inflight_queue, polls):
            if rids_to_check is not None:
                if req.rid not in rids_to_check:
                    undone_reqs.append(req)
                    continue
            if req.pending_bootstrap:
                if poll == KVPoll.Bootstrapping:
                    undone_reqs.append(req)
                continue
            if poll in [KVPoll.WaitingForInput, KVPoll.Transferring]:
                undone_reqs.append(req)
            elif poll == KVPoll.Success:
                done_reqs.append(req)
            elif poll == KVPoll.Failed:
                done_reqs.append(req)
            else:
                undone_reqs.append(req)
        self.disagg_prefill_inflight_queue = undone_reqs
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
