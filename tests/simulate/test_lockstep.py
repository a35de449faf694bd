"""The lock-step engine both simulated worlds run on (``pdguard.simulate.lockstep``), on a toy
world of its own, and the one gap classification both worlds share."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pdguard.simulate import lockstep, standins
from pdguard.simulate.decode import standins as decode_standins
from pdguard.simulate.decode import world as decode_world
from pdguard.simulate.loader import Target
from pdguard.simulate.lockstep import FIRST_ROOM, Event
from pdguard.simulate.prefill import world

# a target with no module: a failure is placed at its label
TARGET = Target(
    label="toy",
    version=None,
    mixin=("toy.py", "ToyMixin"),
    bootstrap_queue=("toy.py", "ToyQueue"),
    nixl_sender=None,
    modules=[],
    self_reads={},
    loaded={},
    replaced=(),
)


@dataclass(frozen=True)
class ToySpec:
    rid: str


@dataclass(frozen=True)
class ToyConfig(lockstep.LockstepConfig[ToySpec]):
    settle_at: int | None = None  # the step after which the world has settled
    fail_at: tuple[int, int] | None = None  # (rank, step): the rank raises in that step
    stall_at: tuple[int, int] | None = None  # (rank, step): the rank sleeps STALL_S there


STALL_S = 3.0
REQUESTS = (ToySpec("a"), ToySpec("b"))
ToySnapshot = tuple[int, float]
ToyTrace = lockstep.LockstepTrace[ToyConfig, ToySnapshot]


class ToyRank(lockstep.LockstepRank["ToyWorld"]):
    def step(self) -> None:
        here = (self.rank, self.world.step)
        self.record("stepped", None, str(self.now()))
        if here == self.world.config.fail_at:
            raise ValueError(f"rank {self.rank} fails in step {self.world.step}")
        if here == self.world.config.stall_at:
            time.sleep(STALL_S)


class ToyWorld(lockstep.LockstepWorld[ToyConfig, ToySpec, ToyRank, ToySnapshot, ToyTrace]):
    SIMULATION = lockstep.SimulationCode()

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config, TARGET)
        self.collective = threading.Barrier(config.ranks)
        self.ranks = [ToyRank(self, i) for i in range(config.ranks)]

    def _barriers(self) -> tuple[threading.Barrier, ...]:
        return (self.collective,)

    def _snapshot(self) -> ToySnapshot:
        return (self.step, self.time)

    def _settled(self) -> bool:
        return self.config.settle_at is not None and self.step >= self.config.settle_at

    def _trace(self, events: list[Event]) -> ToyTrace:
        return lockstep.LockstepTrace(self.config, self.snapshots, events, self.failure, self.time)


def _steps(trace: ToyTrace) -> list[tuple[int, int]]:
    return [(e.step, e.rank) for e in trace.events_of("stepped")]


def test_the_ranks_step_in_lock_step_until_the_horizon() -> None:
    toy = ToyWorld(ToyConfig(REQUESTS, horizon=1.0))
    assert toy.rooms == {"a": FIRST_ROOM, "b": FIRST_ROOM + 1}
    assert toy.by_room[FIRST_ROOM + 1] == ToySpec("b")
    trace = toy.run()
    # the step that would pass the horizon (1.0 s) is not taken
    assert trace.snapshots == [(0, 0.0), (1, 0.25), (2, 0.5), (3, 0.75), (4, 1.0)]
    assert trace.end == 1.0 and trace.failure is None
    assert _steps(trace) == [(step, rank) for step in range(5) for rank in (0, 1)]
    assert [e.detail for e in trace.events if e.rank == 1] == ["0.0", "0.25", "0.5", "0.75", "1.0"]


def test_a_settled_world_stops_before_the_horizon() -> None:
    trace = ToyWorld(ToyConfig(REQUESTS, horizon=1.0, settle_at=1)).run()
    assert trace.snapshots == [(0, 0.0), (1, 0.25)] and trace.end == 0.25


def test_the_first_failure_ends_the_run_and_releases_every_barrier() -> None:
    toy = ToyWorld(ToyConfig(REQUESTS, 3, horizon=1.0, fail_at=(1, 2)))
    trace = toy.run()
    failure = trace.failure
    assert failure is not None
    assert (failure.rank, failure.time) == (1, 0.5)
    assert isinstance(failure.error, ValueError)
    assert failure.where.endswith("in step") and __file__ in failure.where
    assert failure.gap is None  # the toy's own error, not the simulation's
    assert toy.collective.broken and toy.step_barrier.broken
    assert max(step for step, _ in _steps(trace)) == 2  # no rank went on to step 3
    assert len(trace.snapshots) == 2


def test_a_rank_stuck_past_the_barrier_timeout_is_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lockstep, "BARRIER_TIMEOUT", 0.5)
    trace = ToyWorld(ToyConfig(REQUESTS, horizon=1.0, stall_at=(0, 1))).run()
    failure = trace.failure
    assert failure is not None and isinstance(failure.error, TimeoutError)
    assert str(failure.error).startswith("a rank did not finish step 1 within 0.5 s (the ranks")
    assert failure.rank == 1 and failure.where == "a barrier" and failure.gap is None


# -- the simulation's gaps ---------------------------------------------------------------------


def _gap(simulation: lockstep.SimulationCode, call: Callable[[], object]) -> str | None:
    try:
        call()
    except Exception as exc:
        return simulation.gap(TARGET, exc, traceback.extract_tb(exc.__traceback__))
    raise AssertionError("the call raised nothing")


def _call(function: Callable[..., object], *args: object) -> Callable[[], object]:
    """``function(*args)``, however many arguments it takes (the wrong call is the point)."""
    return lambda: function(*args)


def _read(obj: object, attr: str) -> Callable[[], object]:
    return lambda: getattr(obj, attr)


def fork_helper(value: int) -> int:
    """A function of the target's own."""
    return value


BOTH = pytest.mark.parametrize("simulation", [world.World.SIMULATION, ToyWorld.SIMULATION])


@BOTH
def test_a_stand_in_called_in_a_way_it_does_not_accept_is_a_gap(
    simulation: lockstep.SimulationCode,
) -> None:
    # a stand-in both halves share (the prefill world's own are its SIMULATION's too)
    gap = _gap(simulation, _call(standins.kv_to_page_num))
    assert gap is not None
    assert gap.startswith("toy: cannot run: a stand-in does not take this call (TypeError: ")


@BOTH
def test_the_targets_own_errors_are_not_gaps(simulation: lockstep.SimulationCode) -> None:
    assert _gap(simulation, lambda: dict[str, int]()["missing"]) is None
    assert _gap(simulation, _call(fork_helper)) is None


def test_the_decode_worlds_own_stand_ins_are_the_simulations() -> None:
    """The decode half's stand-ins count as stand-ins: a call they do not accept, an attribute
    they do not have, an exception they raise."""
    simulation = decode_world.DecodeWorld.SIMULATION
    called = _gap(simulation, _call(decode_standins.all_reduce_flags, [1]))
    assert called is not None and "a stand-in does not take this call" in called
    used = _gap(simulation, _read(decode_standins.SimTensor([1]), "shape"))
    assert used is not None and "a stand-in does not model this" in used
    assert "'SimTensor' object has no attribute 'shape'" in used
    raised = _gap(simulation, lambda: decode_world._class({"X": 1}, "X"))
    assert raised is not None and "a stand-in raised AssertionError" in raised
    assert "(in _class)" in raised
