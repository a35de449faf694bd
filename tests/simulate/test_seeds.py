"""``simulate --seeds``: seeded fault schedules, the properties at every step, the seed that
replays a failure, and a shrunk schedule kept as a regression test."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.sglang_names import INFLIGHT_TIMEOUT_ENV
from pdguard.simulate import seeds
from pdguard.simulate.prefill.world import WorldConfig
from pdguard.simulate.spec import RequestSpec
from pdguard.tree import open_tree
from tests.simulate.test_properties import SWEEP_ABORT, _hand_fixed
from tests.snippets import TOY_PREFILL, make_toy

# seed 0's schedule on the unpatched toy, shrunk by ``seeds.shrink``: one request whose decode
# side restarted, alone, its lag spread gone too (printed as "shrunk: s0-1-decode-restart:
# arrival 3.58 s, ...")
SHRUNK_SEED_0 = WorldConfig(
    (RequestSpec("s0-1-decode-restart", arrival=3.58, prefill_s=2.7, transfer_s=None),),
    2,
    horizon=seeds.HORIZON,
    env={INFLIGHT_TIMEOUT_ENV: f"{seeds.TIMEOUT:g}"},
)


def test_a_seed_replays_exactly(tmp_path: Path) -> None:
    tree = open_tree(make_toy(tmp_path / "toy", TOY_PREFILL))
    first = simulate.run_seeds(tree, [0, 1])
    again = simulate.run_seeds(tree, [1, 0])
    assert {r.seed: r for r in first} == {r.seed: r for r in again}
    assert first[0].violations and first[0].violations[0].prop == "bounded"


def test_the_shrunk_schedule_of_seed_0_is_a_regression_test(tmp_path: Path) -> None:
    target = simulate.load(open_tree(make_toy(tmp_path / "toy", TOY_PREFILL)))
    shrunk = seeds.shrink(seeds.schedule(0, target, 2), target, "bounded")
    assert seeds.describe(shrunk) == seeds.describe(SHRUNK_SEED_0)
    assert [v.prop for v in seeds.run_schedule(SHRUNK_SEED_0, target)] == ["bounded"]
    fixed = simulate.load(open_tree(_hand_fixed(tmp_path, SWEEP_ABORT)))
    assert seeds.run_schedule(SHRUNK_SEED_0, fixed) == []


def test_a_correct_fix_keeps_every_property_under_random_faults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _hand_fixed(tmp_path, SWEEP_ABORT)
    assert main(["simulate", str(root), "--seeds", "12"]) == 0, capsys.readouterr().out
    assert "12 seed(s) passed, 0 failed" in capsys.readouterr().out


def test_the_cli_prints_the_seed_that_replays_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_toy(tmp_path / "toy", TOY_PREFILL)
    assert main(["simulate", str(root), "--seed", "0"]) == 1
    out = capsys.readouterr().out
    assert "seed 0: FAIL" in out and f"replay: pdguard simulate {root} --seed 0" in out
    assert "shrunk: s0-1-decode-restart" in out
    for bad in ("0", "1001"):
        assert main(["simulate", str(root), "--seeds", bad]) == 2
        assert "--seeds must be between 1 and 1000" in capsys.readouterr().err
