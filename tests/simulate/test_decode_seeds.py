"""``simulate --seeds`` on the decode side: seeded schedules on the release's own decode queues
and receivers, the properties at every step, the seed that replays a failure, and a shrunk
failing schedule kept as a regression test (fetched releases, never committed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.sglang_names import WAITING_TIMEOUT_ENV
from pdguard.simulate import seeds
from pdguard.simulate.decode import loader as decode_loader
from pdguard.simulate.decode.loader import DecodeTarget
from pdguard.simulate.decode.world import DecodeConfig
from pdguard.simulate.decode.world import simulate as run_decode
from pdguard.simulate.spec import DecodeSpec
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.helpers import patched_copy

RELEASE = "0.5.14"  # has pending_reqs (0.5.10+) and retraction; its own waiting timeout
ENV = {WAITING_TIMEOUT_ENV: f"{seeds.TIMEOUT:g}"}
# seed 40's decode schedule on unpatched 0.5.14, shrunk by ``seeds.shrink_decode``: a request
# whose room the prefill (DP 2) never registers, alone, its clock skew gone (printed as
# "shrunk: d40-0-never-registered: nixl, arrival 2.27 s, ...")
SHRUNK_SEED_40 = DecodeConfig(
    (
        DecodeSpec(
            "d40-0-never-registered",
            backend="nixl",
            arrival=2.27,
            transfer_s=0.53,
            registered=False,
        ),
    ),
    2,
    horizon=seeds.HORIZON,
    env=ENV,
    prefill_dp_size=2,
)
# seed 41's decode schedule on patched 0.5.14 (before poll_pending_reqs), shrunk, memory kept
# full: a retracted request waits for memory while another request's room is never
# registered. process_decode_queue skips pop_preallocated while retracted requests wait, and
# with it _resolve_pending_reqs, where the pending timeout is: the pending request waited as
# long as the retracted one, here for ever
GATED = DecodeConfig(
    (
        DecodeSpec("retracted", arrival=1.0, retracted=True),
        DecodeSpec("pending", backend="nixl", arrival=2.0, registered=False),
    ),
    2,
    horizon=seeds.HORIZON,
    env=ENV,
    memory_full=((0.0, seeds.HORIZON),),
    prefill_dp_size=2,
)
PATCHED_SEEDS = 8  # a few seconds of decode schedules on a patched release


@pytest.fixture(scope="module")
def unpatched() -> DecodeTarget:
    return decode_loader.load(open_tree(fetch_release(RELEASE)))


@pytest.fixture(scope="module")
def patched_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return patched_copy(RELEASE, tmp_path_factory.mktemp("seeds") / RELEASE)


@pytest.fixture(scope="module")
def patched(patched_root: Path) -> DecodeTarget:
    return decode_loader.load(open_tree(patched_root))


def test_the_same_seed_draws_the_same_schedule_and_run(unpatched: DecodeTarget) -> None:
    assert seeds.decode_schedule(40, unpatched, 2) == seeds.decode_schedule(40, unpatched, 2)
    assert seeds.decode_schedule(40, unpatched, 2) != seeds.decode_schedule(41, unpatched, 2)
    first = seeds.run_seeds(None, [40, 8], 2, unpatched)
    again = seeds.run_seeds(None, [8, 40], 2, unpatched)
    assert {r.seed: r for r in first} == {r.seed: r for r in again}
    assert all(r.side == "decode" and r.violations for r in first)


def test_the_shrunk_schedule_of_seed_40_is_a_regression_test(
    unpatched: DecodeTarget, patched: DecodeTarget
) -> None:
    shrunk = seeds.shrink_decode(seeds.decode_schedule(40, unpatched, 2), unpatched, "bounded")
    assert seeds.describe_decode(shrunk) == seeds.describe_decode(SHRUNK_SEED_40)
    found = seeds.run_decode_schedule(SHRUNK_SEED_40, unpatched)
    assert [v.prop for v in found] == ["bounded"]
    assert "still waiting (prealloc/pending)" in found[0].detail
    assert "and at the end of the run (180 s)" in found[0].detail
    assert seeds.run_decode_schedule(SHRUNK_SEED_40, patched) == []


def test_a_patched_release_keeps_every_property_under_random_decode_faults(
    patched: DecodeTarget,
) -> None:
    results = seeds.run_seeds(None, range(PATCHED_SEEDS), 2, patched)
    assert [r.seed for r in results] == list(range(PATCHED_SEEDS))
    assert [v.line() for r in results for v in r.violations] == []


def test_a_pending_request_is_bounded_while_retracted_requests_wait(
    unpatched: DecodeTarget, patched: DecodeTarget
) -> None:
    """Seed 41: memory full to the end, so the retracted request waits for ever and nothing is
    admitted; the pending request is still failed once its timeout passes, and its client
    gets the reason (poll_pending_reqs, before the retraction gate)."""
    gated = seeds.run_decode_schedule(GATED, unpatched)  # 0.5.14 has no pending timeout
    assert [(v.prop, v.rid) for v in gated] == [("bounded", "pending")]
    assert seeds.run_decode_schedule(GATED, patched) == []
    trace = run_decode(GATED, patched)
    errors = [e for e in trace.events_of("client_error", "pending") if e.rank == 0]
    assert len(errors) == 1
    assert 2.0 + seeds.TIMEOUT < errors[0].time < 2.0 + seeds.TIMEOUT + 5.0
    assert "Decode handshake failed" in errors[0].detail
    assert not trace.events_of("client_error", "retracted")
    assert not any("pending" in s.pending[0] for s in trace.snapshots[-3:])


def test_a_late_registration_re_queues_the_pending_request(patched: DecodeTarget) -> None:
    """The prefill registers the room 20 s after the request arrived: the request waits in
    pending_reqs, is re-queued, transfers and completes; never failed."""
    late = DecodeSpec("late", arrival=1.0, transfer_s=2.0, register_s=20.0)
    config = DecodeConfig((late,), 2, horizon=seeds.HORIZON, env=ENV, prefill_dp_size=2)
    trace = run_decode(config, patched)
    pending = [s.time for s in trace.snapshots if "late" in s.pending[0]]
    assert pending and pending[0] == 1.0 and 20.0 < pending[-1] < 22.0
    assert any("late" in s.transfer[0] for s in trace.snapshots)
    assert not trace.events_of("client_error")
    assert seeds.decode_violations(trace) == []


def test_a_retracted_request_resumes_when_memory_comes_back(patched: DecodeTarget) -> None:
    retracted = DecodeSpec("back", arrival=1.0, retracted=True)
    config = DecodeConfig(
        (retracted,), 2, horizon=seeds.HORIZON, env=ENV, memory_full=((0.0, 30.0),)
    )
    trace = run_decode(config, patched)
    waiting = [s.time for s in trace.snapshots if "back" in s.retracted[0]]
    assert waiting and waiting[-1] < 30.0
    streamed = [e for e in trace.events_of("streamed", "back")]
    assert len(streamed) == 2 and not streamed[0].detail.startswith("FINISH_ABORT")
    assert seeds.decode_violations(trace) == []


def test_a_pause_delays_the_deadline_to_the_first_step_after_it(patched: DecodeTarget) -> None:
    """The prefill is gone; the deadline (60 s after the indices) falls inside a pause: the
    request is failed in the first steps after the pause, not before its deadline."""
    gone = DecodeSpec("gone", arrival=1.0, transfer_s=None)
    config = DecodeConfig((gone,), 2, horizon=seeds.HORIZON, env=ENV, stalls=((50.0, 80.0),))
    trace = run_decode(config, patched)
    errors = [e for e in trace.events_of("client_error", "gone") if e.rank == 0]
    assert errors and 80.0 <= errors[0].time <= 80.0 + seeds.LAG_STEPS * config.step
    assert seeds.decode_violations(trace) == []


def test_the_cli_prints_the_decode_seed_that_replays_a_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = fetch_release(RELEASE)
    assert main(["simulate", str(root), "--seed", "40"]) == 1
    out = capsys.readouterr().out
    assert "seed 40 (decode): FAIL (d40-0-never-registered: nixl" in out
    assert "  shrunk: d40-0-never-registered: nixl, arrival 2.27 s" in out
    assert f"replay: pdguard simulate {root} --seed 40" in out
    assert main(["simulate", str(root), "--seed", "40", "--format", "json"]) == 1
    sides = {r["side"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(sides) == {"prefill", "decode"}
    assert sides["decode"]["violations"][0]["prop"] == "bounded"


def test_run_seeds_draws_decode_schedules_wherever_the_tree_has_a_decode_side(
    patched_root: Path,
) -> None:
    results = simulate.run_seeds(open_tree(patched_root), [0, 1])
    assert [(r.seed, r.side) for r in results] == [
        (0, "prefill"),
        (0, "decode"),
        (1, "prefill"),
        (1, "decode"),
    ]
    assert not any(r.violations for r in results)


def test_optimistic_requeues_are_drawn_where_the_prefill_has_them(
    unpatched: DecodeTarget, patched: DecodeTarget
) -> None:
    """0.5.14's prefill has optimistic prefill: seed 46 draws two requests its prefill yields
    twice and re-prefills before their KV reaches the decode. On the patched release every
    property holds: the one the re-prefills push past its deadline (indices at 7.5 s, KV at
    about 75 s) is failed at its deadline, not before; the other completes, never failed."""
    assert unpatched.prefill_requeues
    config = seeds.decode_schedule(46, unpatched, 2)
    requeued = {s.rid: (s.requeues, s.requeue_s) for s in config.requests if s.requeues}
    assert requeued == {"d46-0-stall": (2, 40.84), "d46-1-healthy": (2, 37.9)}
    assert "after 2 optimistic requeue(s) of its prefill (40.84 s)" in seeds.describe_decode(config)
    assert seeds.run_decode_schedule(config, patched) == []
    trace = run_decode(config, patched)
    ended = {
        rid: [(e.time, e.detail.split("(")[0]) for e in trace.events_of("streamed", rid)]
        for rid in requeued
    }
    assert ended["d46-0-stall"][0] == (67.5, "FINISH_ABORT")  # 60 s after its indices
    assert ended["d46-1-healthy"][0][1] == "FINISH_LENGTH"
    # the shrinker can take the requeues away, and a prefill without optimistic prefill
    # (0.5.10) draws none for the same seed
    plain = seeds._decode_faults(config)[0]
    assert not plain.requests[0].requeues and plain.requests[0].transfer_s == 26.85
    older = decode_loader.load(open_tree(fetch_release("0.5.10")))
    assert not older.prefill_requeues
    assert not any(s.requeues for s in seeds.decode_schedule(46, older, 2).requests)
