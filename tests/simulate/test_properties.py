"""The scenarios judge the property, not pdguard's implementation: hand-written fixes of the
toy prefill module (tests/snippets.py), in styles pdguard never writes, pass when they keep the
property and fail for the property they break.

* an end-of-step sweep that aborts expired senders after the poll (so a request fails one step
  later than pdguard's fix), with no off switch (``0`` is a 0 s deadline);
* the same sweep that drops the request on each rank's own clock (ranks disagree);
* the same sweep that answers the client but never frees the request's KV.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.sglang_names import INFLIGHT_TIMEOUT_ENV
from pdguard.simulate.lockstep import LAG_STEPS
from pdguard.tree import open_tree
from tests.snippets import TOY_PREFILL, make_toy

IMPORTS = "import logging\n"
STAMP = "            self.disagg_prefill_inflight_queue.append(req)\n"
END = "        self.disagg_prefill_inflight_queue = undone\n"
HEADER = f"""import logging
import os
import time

INFLIGHT_TIMEOUT_S = float(os.environ.get("{INFLIGHT_TIMEOUT_ENV}", "300"))
"""

# the sweep, at the end of the step: the sender is aborted, so the next poll (MIN-reduced over
# the ranks) reports Failed on every rank
SWEEP_ABORT = """
    def sweep_expired_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.inflight_entered_at >= INFLIGHT_TIMEOUT_S:
                req.disagg_kv_sender.abort()
"""
# broken: each rank drops the request on its own clock (no agreement through the poll)
SWEEP_LOCAL = """
    def sweep_expired_inflight(self):
        now = time.monotonic()
        kept, expired = [], []
        for req in self.disagg_prefill_inflight_queue:
            if now - req.inflight_entered_at >= INFLIGHT_TIMEOUT_S:
                self.tree_cache.cache_finished_req(req)
                prepare_abort(req, "timed out in the inflight queue")
                expired.append(req)
            else:
                kept.append(req)
        self.stream_output(expired, False)
        self.disagg_prefill_inflight_queue = kept
"""
# broken: the client hears, the KV is never freed
SWEEP_LEAK = SWEEP_LOCAL.replace("                self.tree_cache.cache_finished_req(req)\n", "")


def _hand_fixed(tmp_path: Path, sweep: str) -> Path:
    text = TOY_PREFILL.replace(IMPORTS, HEADER, 1)
    text = text.replace(STAMP, "            req.inflight_entered_at = time.monotonic()\n" + STAMP)
    text = text.replace(END, END + "        self.sweep_expired_inflight()\n")
    text = text.replace("\n    def send_kv_chunk", sweep + "\n    def send_kv_chunk")
    return make_toy(tmp_path / "hand-fixed", text)


def _rows(report: simulate.SimulationReport) -> dict[str, simulate.Row]:
    return {row.scenario: row for row in report.rows}


NAMES = ["wedge", "skewed-ranks", "deadline-120s", "healthy-traffic", "long-prefill"]


def test_an_end_of_step_sweep_a_step_later_without_an_off_switch_passes(tmp_path: Path) -> None:
    root = _hand_fixed(tmp_path, SWEEP_ABORT)
    report = simulate.run(open_tree(root), ranks=2, names=[*NAMES, "deadline-off"])
    rows = _rows(report)
    assert {n: r.verdict for n, r in rows.items() if n != "deadline-off"} == dict.fromkeys(
        NAMES, "pass"
    ), {n: r.observed for n, r in rows.items()}
    # one step later than the first step past the deadline, within the documented lag
    assert "failed at 301.5 s (deadline 301.1 s)" in rows["wedge"].observed  # 301.25 s + 1 step
    # no off switch: 0 is a 0 s deadline, so the "off" expectation does not apply
    off = rows["deadline-off"]
    assert off.verdict == "n/a", off.observed
    assert "no off switch" in off.observed and "0 s deadline" in off.observed
    assert report.passed


def test_a_sweep_on_each_ranks_own_clock_fails_unanimity(tmp_path: Path) -> None:
    root = _hand_fixed(tmp_path, SWEEP_LOCAL)
    report = simulate.run(open_tree(root), ranks=2, names=["skewed-ranks"])
    row = _rows(report)["skewed-ranks"]
    assert row.verdict == "fail"
    assert any(
        why in row.observed
        for why in ("ranks diverged", "inflight queues differ", "different steps")
        # the rank whose queue is now empty skips the all-reduce the other waits in
    ), row.observed


def test_a_sweep_that_never_frees_kv_fails_for_it(tmp_path: Path) -> None:
    root = _hand_fixed(tmp_path, SWEEP_LEAK)
    report = simulate.run(open_tree(root), ranks=1, names=["wedge"])
    row = _rows(report)["wedge"]
    assert row.verdict == "fail"
    assert "KV was never released" in row.observed, row.observed


@pytest.mark.parametrize("steps", [LAG_STEPS + 2])
def test_later_than_the_lag_fails(tmp_path: Path, steps: int) -> None:
    """A deadline that fires more than LAG_STEPS steps late breaks the property."""
    late = SWEEP_ABORT.replace(">= INFLIGHT_TIMEOUT_S", f">= INFLIGHT_TIMEOUT_S + {steps} * 0.25")
    report = simulate.run(open_tree(_hand_fixed(tmp_path, late)), ranks=1, names=["wedge"])
    row = _rows(report)["wedge"]
    assert row.verdict == "fail"
    assert f"the lag allowed is {LAG_STEPS} steps" in row.observed, row.observed
