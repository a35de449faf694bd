"""Under pipeline parallelism every stage passes the consensus (``rids_to_check``) to the
inflight function, so a deadline that stands aside whenever it is given is no deadline there:
PDG001 reports the keep sites, and PDG002 does not call it one that fails ended transfers.

The module is written here in pdguard's own words; only the names the model keys on are
SGLang's.
"""

from __future__ import annotations

import pytest

from pdguard import checks
from pdguard.checks import Project
from pdguard.sglang_names import PREFILL_PATH
from tests.snippets import TOY_PP_PREFILL

STAMP = "            req.handed_over_at = time.monotonic()\n"

# The deadline loop, inline; ``{guard}`` is what runs before the clock test for each request.
INLINE = """\
        for req in self.disagg_prefill_inflight_queue:
{guard}            if time.monotonic() - req.handed_over_at > LIMIT_S:
                req.disagg_kv_sender.abort()
"""
SKIPS_UNDER_PP = "            if rids_to_check is not None:\n                continue\n"
# What pdguard's own fix does: under PP, spare a transfer this stage already polls as ended.
SPARES_ENDED = (
    "            if rids_to_check is not None and req.disagg_kv_sender.poll() in (\n"
    "                KVPoll.Success,\n"
    "                KVPoll.Failed,\n"
    "            ):\n"
    "                continue\n"
)
WRAPPED = """\
        if rids_to_check is None:
            for req in self.disagg_prefill_inflight_queue:
                if time.monotonic() - req.handed_over_at > LIMIT_S:
                    req.disagg_kv_sender.abort()
"""
# A helper that returns at once when it is given the consensus, under its own name.
HELPER = """
    def _expire(self, agreed):
        if agreed is not None:
            return
        for req in self.disagg_prefill_inflight_queue:
            if time.monotonic() - req.handed_over_at > LIMIT_S:
                req.disagg_kv_sender.abort()
"""
SKIPPED = "the deadline is skipped when rids_to_check is given"


def findings(deadline: str, helper: str = "") -> list[tuple[str, str]]:
    text = TOY_PP_PREFILL.format(stamp=STAMP, helper=helper, call=deadline)
    project = Project({PREFILL_PATH: text})
    return [(f.code, f.message) for f in checks.run(project, ["PDG001", "PDG002"])]


@pytest.mark.parametrize(
    ("deadline", "helper"),
    [
        (INLINE.format(guard=SKIPS_UNDER_PP), ""),
        (WRAPPED, ""),
        ("        self._expire(rids_to_check)\n", HELPER),
        ("        self._expire(agreed=rids_to_check)\n", HELPER),
    ],
    ids=["continue-when-given", "only-when-none", "helper-positional", "helper-keyword"],
)
def test_a_deadline_off_under_pp_is_no_deadline(deadline: str, helper: str) -> None:
    found = findings(deadline, helper)
    assert [code for code, _ in found] == ["PDG001"]  # the one keep site, no PDG002
    assert SKIPPED in found[0][1]


def test_a_deadline_that_spares_ended_transfers_under_pp_holds() -> None:
    assert findings(INLINE.format(guard=SPARES_ENDED)) == []


def test_a_deadline_that_ignores_the_consensus_fails_ended_transfers() -> None:
    """No guard at all: the deadline runs under PP, and can fail a request this stage already
    polled Success for (PDG002), but it is a deadline (no PDG001)."""
    assert [code for code, _ in findings(INLINE.format(guard=""))] == ["PDG002"]


def test_a_guard_on_the_truth_of_the_consensus_is_not_a_skip() -> None:
    """``if rids_to_check: continue`` lets the deadline run whenever the consensus is empty:
    not modelled as skipped (nor as sparing ended transfers)."""
    guard = "            if rids_to_check:\n                continue\n"
    assert [code for code, _ in findings(INLINE.format(guard=guard))] == ["PDG002"]
