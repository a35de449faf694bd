"""``check --confirm`` on every case of the hand-written corpus (prefill and decode) and on
hostile code, against its written ground truth (``tests/simulate/confirm_corpus.py``).

Per case, the merged verdict (what ``check --confirm`` reports) must say unsafe wherever the
corpus's ground truth does; never "All checks passed!" on a tree that waits for ever or where a
scenario shows a request still waiting; where the simulation cannot run, the static verdict
stands alone and the reason is one line; and where it runs, the merged verdict agrees with the
run-time ground truth (the corpus's plus ``STALL_FAILS``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pdguard.checks import CONFIRM_CODE
from tests.corpus import PREFILL
from tests.simulate.confirm_corpus import (
    ESCAPED,
    HOSTILE_LINES,
    STALL_FAILS,
    Case,
    Measured,
    cases,
    count,
    measure,
)

CASES = {f"{c.corpus}:{c.name}": c for c in cases()}
_MEASURED: dict[str, Measured] = {}


def _measured(key: str) -> Measured:
    if key not in _MEASURED:
        _MEASURED[key] = measure(CASES[key])
    return _MEASURED[key]


@pytest.mark.parametrize("key", sorted(CASES))
def test_check_confirm_agrees_with_the_ground_truth(key: str) -> None:
    m = _measured(key)
    case: Case = m.case
    if case.liveness_unsafe:  # it waits for ever (or the corpus says pdguard cannot prove it)
        assert not m.all_checks_passed, (key, m.simulation)
    if not case.unsafe:
        assert not m.merged, (key, m.merged, m.simulation)  # no false positive
    if m.ran:
        # where the scenarios ran, check --confirm agrees with the run-time ground truth
        assert m.merged_says_unsafe == case.unsafe, (key, m.merged, m.simulation)
        # the witnesses disagree: PDG009 says so (never a silent pass)
        assert m.static_says_unsafe == m.simulation_says_unsafe or CONFIRM_CODE in m.merged
    else:
        # cannot run: one line, and the static verdict stands alone (no PDG009)
        assert "\n" not in m.simulation, m.simulation
        assert m.merged == m.static, (key, m.merged)


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_scenario_showing_a_request_still_waiting_is_never_a_pass(key: str) -> None:
    m = _measured(key)
    if m.still_waiting:
        assert not m.all_checks_passed, (key, m.still_waiting)


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_hostile_code_is_refused_and_the_static_verdict_stands(name: str) -> None:
    m = _measured(f"hostile:{name}")
    assert not m.ran and m.simulation.startswith("cannot run: ")
    text = m.case.files[PREFILL]
    line = text.splitlines().index(f"        {HOSTILE_LINES[name]}") + 1
    assert f"{PREFILL}:{line}: cannot " in m.simulation  # the hostile line
    assert m.merged == ("PDG001",)  # the tree waits for ever: never "All checks passed!"
    assert not os.path.exists(ESCAPED)


def test_the_stall_ground_truth_names_correct_corpus_cases_only() -> None:
    prefill = {c.name: c for c in CASES.values() if c.corpus == "prefill"}
    assert set(prefill) >= STALL_FAILS
    assert all(not prefill[name].liveness_unsafe for name in STALL_FAILS)


def test_the_counts_where_the_simulation_runs() -> None:
    """Over the prefill corpus: the merged verdict has no false positive against the run-time
    ground truth and no false negative against the corpus's; each witness alone misses what
    the other sees (the static rules model no stall; the simulation cannot run every tree)."""
    measured = [_measured(k) for k in sorted(CASES) if k.startswith("prefill:")]
    merged = count(measured, "merged")
    assert merged.fp == 0
    assert count(measured, "merged", liveness=True).fn == 0
    static = count(measured, "static")
    assert static.fn >= len(STALL_FAILS) - 1  # a stall's failed success: the static rules are blind
    simulation = count(measured, "simulation")
    assert 0 < simulation.cannot_run < len(measured)
    assert simulation.fp == 0


def test_nothing_escaped() -> None:
    assert not Path(ESCAPED).exists()


# cases the simulation could not run before (issue 24), each with the rows it must fail now
NOW_RUN = {
    # a fork's per-rid map of stamps (started empty by its own __init__, outside the tree)
    "stamp-by-rid": {"stalled-queue"},
    "stamp-by-rid-restamped": {"wedge", "skewed-ranks", "deadline-120s", "stalled-queue"},
    # the stamp deleted on the keep path and read again: AttributeError, as in SGLang
    "stamp-deleted-on-keep": {"wedge", "healthy-traffic", "stalled-queue"},
}


@pytest.mark.parametrize("name", sorted(NOW_RUN))
def test_cases_the_simulation_now_runs(name: str) -> None:
    m = _measured(f"prefill:{name}")
    assert m.ran, m.simulation
    assert NOW_RUN[name] <= set(m.failing), m.failing
    assert m.merged_says_unsafe == m.case.unsafe


@pytest.mark.parametrize(
    "name, why",
    [
        ("entry-dict", '"__dict__" is an attribute the sandbox refuses'),
        ("entry-vars", "vars is a builtin the simulation's sandbox does not give"),
        ("extend-unstamped", "batch.retried"),  # requests from a collection of the fork's own
        ("stamp-by-rid-read-elsewhere", "self.queued_at"),  # read, never written here
        ("renamed-function", "defines process_disagg_prefill_inflight_queue"),
    ],
)
def test_cases_still_refused(name: str, why: str) -> None:
    m = _measured(f"prefill:{name}")
    assert not m.ran and why in m.simulation, m.simulation


# the decode corpus (issue 24): every case runs, and the scenario that shows its hazard fails
DECODE_FAILING = {
    "early-continue-bound": set(),
    "throttle-in-try-finally": set(),
    "fork-pending-timed": set(),
    "deferred-release-list": set(),
    # the fork's own awaiting_rank, re-queued while /query_dp_ranks never answers
    "fork-pending-bare-requests": {"pending-unresolved"},
    "early-continue-inert": {"pending-unresolved"},
    "pending-mixed-clocks": {"pending-unresolved"},
    "entry-deadline-mixed-clocks": {"pending-unresolved"},
    # the retraction gate: the prefill-gone request is never polled while one waits
    "gate-in-try-finally": {"retracted-under-pressure"},
}


def test_the_decode_corpus_is_pinned() -> None:
    assert {k.removeprefix("decode:") for k in CASES if k.startswith("decode:")} == set(
        DECODE_FAILING
    )


@pytest.mark.parametrize("name", sorted(DECODE_FAILING))
def test_every_decode_case_runs_and_agrees_with_its_ground_truth(name: str) -> None:
    """The decode corpus trees resolve the prefill DP rank through /query_dp_ranks, as
    releases do (they used to call a KV-manager method no release has): each runs, and the
    simulation alone agrees with the corpus's ground truth (no PDG009)."""
    m = _measured(f"decode:{name}")
    assert m.ran, m.simulation
    assert set(m.failing) == DECODE_FAILING[name], m.simulation
    assert m.simulation_says_unsafe == m.case.unsafe
    assert CONFIRM_CODE not in m.merged, m.merged
