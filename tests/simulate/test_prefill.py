"""``pdguard simulate``: the target's own inflight-queue code, run against a simulated scheduler.

A toy tree (tests/snippets.py, in the shape pdguard expects; not SGLang's code) covers the
machinery without the network. The ``releases`` tests run every CI release (all 62 with
``PDGUARD_ALL_RELEASES=1``) unpatched, patched, and with hand-broken variants of the patch (the
mutants of tests/mutants.py).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.commands import apply
from pdguard.simulate import standins
from pdguard.simulate.lockstep import Collective, Divergence
from pdguard.simulate.prefill import scenarios
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.helpers import (
    NIXL_NEVER_BOOTSTRAPPING,
    NIXL_STUCK,
    PP_CONSENSUS,
    RELEASES,
    patched_copy,
)
from tests.mutants import MUTANT, mutate_tree
from tests.snippets import TOY_PREFILL, make_toy

# fail without an inflight deadline
WEDGE_ROWS = {"wedge", "skewed-ranks", "deadline-120s"}
# Issue 10's paths: the patch pdguard writes today fails some of them on purpose (they show its
# problems); tests/simulate/test_paths.py covers their mechanics. Left out of "patched passes".
PATH_ROWS = {
    "success-at-deadline",
    "decode-memory-wait",
    "optimistic-requeue",
    "parked-bootstrap",
}
MAIN_ROWS = [name for name in simulate.NAMES if name not in PATH_ROWS]


def _toy(tmp_path: Path, text: str = TOY_PREFILL, patched: bool = False) -> Path:
    root = make_toy(tmp_path / ("toy-patched" if patched else "toy"), text)
    if patched:
        apply.write(apply.plan(open_tree(root)))
    return root


def _verdicts(report: simulate.SimulationReport) -> dict[str, str]:
    return {row.scenario: row.verdict for row in report.rows}


def _row(report: simulate.SimulationReport, name: str) -> simulate.Row:
    return next(row for row in report.rows if row.scenario == name)


# -- the toy tree: no network ----------------------------------------------------------------


def test_unpatched_toy_shows_the_wedge(tmp_path: Path) -> None:
    report = simulate.run(open_tree(_toy(tmp_path)))
    verdicts = _verdicts(report)
    assert {name for name, v in verdicts.items() if v == "fail"} == WEDGE_ROWS
    assert verdicts["bootstrap-wedge"] == "n/a"  # no NixlKVSender in the toy
    wedge = _row(report, "wedge")
    assert wedge.observed.startswith("still waiting after 600 simulated seconds")
    assert "inflight queue on all ranks" in wedge.observed
    assert wedge.seconds == 600


def test_patched_toy_passes_every_scenario(tmp_path: Path) -> None:
    report = simulate.run(open_tree(_toy(tmp_path, patched=True)), ranks=3)
    assert report.passed
    assert set(_verdicts(report).values()) == {"pass", "n/a"}
    wedge = _row(report, "wedge")
    assert "failed at 301.25 s (deadline 301.1 s)" in wedge.observed
    assert "client error, KV released" in wedge.observed
    assert (
        "_fail_timed_out_inflight_reqs"
        in report.loaded["loaded"]["SchedulerDisaggregationPrefillMixin"]
    )


def test_cli_exit_codes_and_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(_toy(tmp_path)), "--scenario", "wedge"]) == 1
    out = capsys.readouterr().out
    assert "wedge" in out and "FAIL" in out and "still waiting after 600" in out
    patched = _toy(tmp_path, patched=True)
    assert main(["simulate", str(patched), "--format", "json", "--ranks", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and data["ranks"] == 1
    assert [s["name"] for s in data["scenarios"]] == list(simulate.NAMES)
    assert main(["simulate", str(patched), "--scenario", "nope"]) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err
    assert main(["simulate", str(patched), "--ranks", "0"]) == 2
    assert "--ranks must be between 1 and 64, got 0" in capsys.readouterr().err
    assert main(["simulate", str(patched), "--ranks", "100000"]) == 2
    assert "--ranks must be between 1 and 64, got 100000" in capsys.readouterr().err


def test_check_simulate_is_one_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unpatched, patched = _toy(tmp_path), _toy(tmp_path, patched=True)
    assert main(["check", str(unpatched), "--simulate"]) == 1
    out = capsys.readouterr().out
    assert "PDG001" in out and "pdguard simulate:" in out and "FAIL" in out
    assert main(["check", str(patched), "--simulate", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["findings"] == [] and data["simulation"][0]["passed"] is True
    assert main(["check", str(patched), "--simulate", "--format", "sarif"]) == 2
    assert "--simulate reports in --format text or json" in capsys.readouterr().err


def test_a_name_without_a_stand_in_cannot_be_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = TOY_PREFILL.replace(
        "logger = logging", "from sglang.srt.utils import mystery\n\nlogger = logging"
    ).replace(
        "        undone, done = [], []\n", "        mystery()\n        undone, done = [], []\n"
    )
    assert main(["simulate", str(_toy(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert (
        "cannot load: mystery is needed by "
        "SchedulerDisaggregationPrefillMixin.process_disagg_prefill_inflight_queue" in err
    )
    assert "has no stand-in" in err


def test_a_scheduler_attribute_without_a_stand_in_cannot_be_loaded(tmp_path: Path) -> None:
    text = TOY_PREFILL.replace("self.attn_tp_cpu_group,", "self.some_new_group,")
    with pytest.raises(simulate.LoadError, match=r"self\.some_new_group is needed by"):
        simulate.run(open_tree(_toy(tmp_path, text)))


def test_an_unbound_name_raises_name_error_as_in_python(tmp_path: Path) -> None:
    """``time`` used without ``import time``: the run fails as SGLang would, not exit 2."""
    text = TOY_PREFILL.replace(
        "            self.tree_cache.cache_unfinished_req(req)\n",
        "            self.tree_cache.cache_unfinished_req(req)\n"
        "            req.entered = time.monotonic()\n",
    )
    report = simulate.run(open_tree(_toy(tmp_path, text)), names=["healthy-traffic"])
    row = _row(report, "healthy-traffic")
    assert row.verdict == "fail"
    assert "NameError: name 'time' is not defined" in row.observed


def test_imports_are_never_executed(tmp_path: Path) -> None:
    """The toy imports sglang, which is not installed: nothing of it is imported."""
    report = simulate.run(open_tree(_toy(tmp_path)), names=["healthy-traffic"])
    assert _row(report, "healthy-traffic").verdict == "pass"
    assert not any(name.split(".")[0] == "sglang" for name in sys.modules)


def test_min_all_reduce_over_threads() -> None:
    collective = Collective(3)
    results: dict[int, object] = {}

    def rank(index: int, values: list[int]) -> None:
        try:
            results[index] = collective(index, values)
        except Exception as exc:
            results[index] = exc

    inputs = {0: [2, 4, 3], 1: [2, 0, 4], 2: [3, 4, 1]}
    threads = [threading.Thread(target=rank, args=item) for item in inputs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: [2, 0, 1], 1: [2, 0, 1], 2: [2, 0, 1]}

    threads = [threading.Thread(target=rank, args=(i, [4] * (i + 1))) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, Divergence) for r in results.values())


def test_stand_ins_are_strict() -> None:
    req = standins.SimReq("r", 1)
    assert getattr(req, "inflight_queue_entry_time", None) is None  # getattr defaults work
    with pytest.raises(standins.MissingStandIn, match=r"req\.not_modelled"):
        _ = req.not_modelled
    with pytest.raises(standins.MissingStandIn):
        _ = standins.Inert("time_stats") < 3


# -- real releases -----------------------------------------------------------------------------


@pytest.mark.releases
@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.version)
def test_unpatched_release_shows_the_wedge(release, capsys: pytest.CaptureFixture[str]) -> None:
    tree = fetch_release(release.version)
    report = simulate.run(open_tree(tree), decode=False)  # the prefill rows (decode: its own file)
    verdicts = _verdicts(report)
    failing = {name for name, verdict in verdicts.items() if verdict == "fail"}
    expected = set(WEDGE_ROWS)
    if release.family in PP_CONSENSUS:
        expected.add("pp-stages")  # its wedged request: no deadline fails it on either stage
    if release.family in NIXL_STUCK:
        expected.add("bootstrap-wedge")
    assert failing == expected, {r.scenario: r.observed for r in report.rows}
    assert _row(report, "wedge").observed.startswith("still waiting after 600 simulated seconds")
    nixl = "n/a" if release.family in NIXL_NEVER_BOOTSTRAPPING else None
    if nixl:
        assert verdicts["bootstrap-wedge"] == "n/a"
    elif release.family not in NIXL_STUCK:
        assert verdicts["bootstrap-wedge"] == "pass"  # fixed upstream from 0.5.18
    assert main(["simulate", str(tree), "--scenario", "wedge"]) == 1
    capsys.readouterr()


@pytest.mark.releases
def test_patched_release_passes(patched_release, capsys: pytest.CaptureFixture[str]) -> None:
    release, root = patched_release
    code = main(
        ["simulate", str(root), "--format", "json", *(f"--scenario={n}" for n in MAIN_ROWS)]
    )
    rows = {s["name"]: s for s in json.loads(capsys.readouterr().out)["scenarios"]}
    assert code == 0, {name: row["observed"] for name, row in rows.items()}
    expected = "n/a" if release.family in NIXL_NEVER_BOOTSTRAPPING else "pass"
    assert rows["bootstrap-wedge"]["verdict"] == expected
    pp = rows.pop("pp-stages")
    assert pp["verdict"] == ("pass" if release.family in PP_CONSENSUS else "n/a"), pp["observed"]
    # n/a where the release's NIXL sender posts no transfer of its own (or cannot run here)
    posted = rows.pop("abort-during-transfer", None)
    if posted is not None:
        assert posted["verdict"] in ("pass", "n/a"), posted["observed"]
    assert {row["verdict"] for name, row in rows.items() if name != "bootstrap-wedge"} == {"pass"}


@pytest.mark.releases
def test_stamp_at_sender_creation_fails_long_prefill(patched_release) -> None:
    _, root = patched_release
    mutate_tree(root, MUTANT["stamp moved to sender creation"])
    report = simulate.run(
        open_tree(root), names=["wedge", "long-prefill", "long-prefill-60s-deadline"]
    )
    verdicts = _verdicts(report)
    assert verdicts["long-prefill-60s-deadline"] == "fail"
    assert "failed" in _row(report, "long-prefill-60s-deadline").observed
    # The default deadline outlasts the 164 s prefill, but the clock started 1 s of prefill
    # early: the wedged request is failed before its deadline.
    assert verdicts["long-prefill"] == "pass"
    assert verdicts["wedge"] == "fail"
    assert "before its deadline" in _row(report, "wedge").observed


@pytest.mark.releases
def test_deadline_after_all_reduce_keeps_the_property_a_step_later(patched_release) -> None:
    """The sender aborted after the all-reduce: the next step's poll fails it on every rank,
    one step after pdguard's own fix would, within the documented lag."""
    _, root = patched_release
    mutate_tree(root, MUTANT["deadline moved after the all-reduce"])
    report = simulate.run(open_tree(root), names=["skewed-ranks", "healthy-traffic"])
    skewed = _row(report, "skewed-ranks")
    assert skewed.verdict == "pass", skewed.observed
    assert "on every rank in the same step" in skewed.observed
    assert _row(report, "healthy-traffic").verdict == "pass"


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.4.7", "0.5.23"])
def test_a_per_rank_deadline_diverges(version: str, tmp_path: Path) -> None:
    root = patched_copy(version, tmp_path / "sglang")
    mutate_tree(root, MUTANT["deadline drops the request locally"])
    report = simulate.run(open_tree(root), ranks=2, names=["skewed-ranks"])
    row = _row(report, "skewed-ranks")
    assert row.verdict == "fail"
    assert "ranks diverged" in row.observed or "inflight queues differ" in row.observed


@pytest.mark.releases
def test_more_ranks_and_a_nixl_sender_with_its_own_code(tmp_path: Path) -> None:
    root = patched_copy("0.5.14", tmp_path / "sglang")
    report = simulate.run(open_tree(root), ranks=4, names=MAIN_ROWS)
    assert report.passed
    bootstrap = _row(report, "bootstrap-wedge")
    assert f"deadline {scenarios.BOOTSTRAP_TIMEOUT + 0.1:g} s" in bootstrap.observed
    loaded = report.loaded["loaded"]
    assert {"poll", "_check_bootstrap_timeout"} <= set(loaded["CommonKVSender"]) | set(  # type: ignore[index]  # the report's JSON is typed object
        loaded["NixlKVSender"]  # type: ignore[index]  # the report's JSON is typed object
    )
