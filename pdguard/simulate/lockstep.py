"""The lock-step engine both simulated worlds run on (``prefill.world`` and ``decode.world``).

Each rank is a daemon thread that runs one iteration of its event loop (``step``) and then waits
at the step barrier; the barrier's action, run once per step while every rank waits, records a
snapshot of every rank's queues and advances the simulated clock by ``step`` seconds, until the
world has settled or the next step would pass the horizon. The first rank to fail ends the run:
its failure is recorded (with the simulation's gap, when the failure is the simulation's rather
than the target's) and every barrier is aborted, so that no rank waits for it.
"""

from __future__ import annotations

import inspect
import math
import sys
import threading
import traceback
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from . import sandbox, standins
from .loader import Target

EPS = 1e-6
BARRIER_TIMEOUT = 60.0  # real seconds: a rank stuck this long is a bug in the simulation
# The documented lag: a request is failed after its deadline and at most this many scheduler
# steps after the first step at or after it (a deadline checked before the poll, or at the end
# of the step, or by a sweep that runs a step later is as correct as one checked in the step
# the deadline passes). Never before the deadline.
LAG_STEPS = 4
FIRST_ROOM = 1000  # the bootstrap room of the first request; the others follow


def lag_verdict(at: float, deadline: float, step: float) -> str | None:
    """Why ``at`` breaks "failed after ``deadline``, within LAG_STEPS steps"; None: it keeps
    it."""
    if at < deadline - EPS:
        return f"failed at {at:g} s, before its deadline ({deadline:g} s)"
    due = math.ceil((deadline - EPS) / step) * step  # the first step at or after the deadline
    if at > due + LAG_STEPS * step + EPS:
        late = round((at - due) / step)
        return (
            f"failed at {at:g} s, {late} steps after the first step past its deadline "
            f"({deadline:g} s; the lag allowed is {LAG_STEPS} steps, {LAG_STEPS * step:g} s)"
        )
    return None


@dataclass(frozen=True)
class Event:
    step: int
    time: float
    rank: int
    kind: str  # abort, kv_released, kv_locked, streamed, kv_send, sender_abort, log, pp_agreed, ...
    rid: str | None
    detail: str


@dataclass(frozen=True)
class RankFailure:
    rank: int
    time: float
    error: BaseException
    where: str  # the innermost frame, "file:line in function"
    # Not the target's failure but the simulation's: a missing stand-in, an import, a
    # stand-in called in a way it does not model. "<file>:<line>: cannot run: <what>".
    gap: str | None = None


ConfigT = TypeVar("ConfigT", bound="LockstepConfig[Any]")
SpecT = TypeVar("SpecT", bound="LockstepSpec")
RankT = TypeVar("RankT", bound="LockstepRank[Any]")
WorldT = TypeVar("WorldT", bound="LockstepWorld[Any, Any, Any, Any, Any]")
SnapshotT = TypeVar("SnapshotT")
TraceT = TypeVar("TraceT")


class LockstepSpec(Protocol):
    """One scripted request."""

    @property
    def rid(self) -> str: ...


@dataclass(frozen=True)
class LockstepConfig(Generic[SpecT]):
    """What every world is configured with: its requests, its ranks, how long it runs (simulated
    seconds) in steps of ``step``, and the environment the target's code reads."""

    requests: tuple[SpecT, ...]
    ranks: int = 2
    horizon: float = 600.0
    step: float = 0.25
    env: Mapping[str, str] = field(default_factory=dict)


class LockstepRank(ABC, Generic[WorldT]):
    """One simulated scheduler rank of ``world``, and the part of ``standins.Context`` every
    rank gives its stand-ins alike: its clock and the record of its events."""

    def __init__(self, world: WorldT, index: int, offset: float = 0.0) -> None:
        self.world = world
        self.rank = index
        self.events: list[Event] = []
        self.offset = offset  # added to every clock reading
        self.lag = 0.0  # how far into the step the rank is, while it handles arrivals

    @abstractmethod
    def step(self) -> None:
        """One iteration of the rank's event loop."""

    def now(self) -> float:
        return self.world.time + self.offset + self.lag

    def world_time(self) -> float:
        return self.world.time

    def record(self, kind: str, req: object, detail: str = "") -> None:
        rid = req if isinstance(req, str) or req is None else getattr(req, "rid", None)
        self.events.append(Event(self.world.step, self.world.time, self.rank, kind, rid, detail))


@dataclass
class LockstepTrace(Generic[ConfigT, SnapshotT]):
    """What a run of a world gives: its snapshots, its ranks' events, the first failure."""

    config: ConfigT
    snapshots: list[SnapshotT]
    events: list[Event]
    failure: RankFailure | None
    end: float

    def events_of(self, kind: str, rid: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (rid is None or e.rid == rid)]


class SimulationCode:
    """The simulation's own modules: the stand-ins, this engine and a world's modules. An
    exception one of them raises, a function of theirs called in a way it does not accept, or
    an object of theirs used in a way it does not model is the simulation's gap, not the
    target's failure (``gap``)."""

    def __init__(self, *modules: str, on_purpose: tuple[type[BaseException], ...] = ()) -> None:
        self._modules = (standins.__name__, __name__, *modules)
        # the SGLang errors the stand-ins raise on purpose, and the simulation's own verdicts
        # (the ranks' divergence), which are judged
        self._on_purpose: tuple[type[BaseException], ...] = (
            standins.KVTransferError,
            standins.DeletedAttribute,
            *on_purpose,
        )

    @cached_property
    def _files(self) -> frozenset[str | None]:
        return frozenset(sys.modules[name].__file__ for name in self._modules)

    @cached_property
    def _classes(self) -> frozenset[type]:
        """The classes the modules define (not the ones made at run time by mixing the
        target's classes with stand-ins: those are the target's as much as the simulation's)."""
        return frozenset(
            value
            for name in self._modules
            for value in vars(sys.modules[name]).values()
            if inspect.isclass(value) and value.__module__ == name
        )

    @cached_property
    def _callables(self) -> frozenset[str]:
        """The modules' own functions and their classes' methods, by the name a TypeError
        gives them (``prepare_abort() got ...``, ``Group.all_reduce_min() takes ...``)."""
        found: set[str] = set()
        for name in self._modules:
            for value in vars(sys.modules[name]).values():
                if getattr(value, "__module__", None) != name:
                    continue
                if inspect.isfunction(value):
                    found |= {value.__qualname__, value.__name__}
                elif inspect.isclass(value):
                    found |= {
                        f"{value.__name__}.{attr}"
                        for attr, member in vars(value).items()
                        if inspect.isfunction(member)
                    }
        return frozenset(found)

    def _names_a_standin(self, message: str) -> bool:
        """Does a TypeError's message start with a stand-in's function name?"""
        name = message.split("(", 1)[0]
        return name in self._callables or name.split(".<locals>.")[0] in self._callables

    def _standin_object(self, exc: BaseException) -> bool:
        """Is ``exc`` about a stand-in object: an attribute it does not have (``exc.obj``), or
        an operation its class does not support (``'TreeCache' object is not iterable``)?"""
        if isinstance(exc, standins.DeletedAttribute):
            return False  # the target's own code deleted it
        if isinstance(exc, AttributeError) and not isinstance(exc, standins.MissingStandIn):
            return type(getattr(exc, "obj", None)) in self._classes
        message = str(exc)
        return isinstance(exc, TypeError) and any(
            f"'{cls.__name__}' object" in message for cls in self._classes
        )

    def gap(self, target: Target, exc: BaseException, frames: traceback.StackSummary) -> str | None:
        """``<file>:<line>: cannot run: <what>`` when ``exc`` is the simulation's gap rather
        than the target's own failure: a stand-in that is missing (MissingStandIn), an import,
        an exception raised inside the simulation's code (other than the errors it raises on
        purpose), a stand-in called in a way it does not accept (a TypeError naming it), or a
        stand-in object without the attribute or operation used on it."""
        rels = {plan.rel for plan in target.modules}
        inner = next((f for f in reversed(frames) if f.filename in rels), None)
        where = target.where(inner.filename, inner.lineno or 0) if inner else target.label
        what = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, standins.MissingStandIn):
            what = str(exc)
        elif isinstance(exc, sandbox.SandboxViolation):
            what = f"{exc} (the simulation's sandbox)"
        elif isinstance(exc, MemoryError):
            what = (
                f"the target's code used more than {sandbox.LIMITS.memory_mb} MB of memory "
                "(the simulation's sandbox)"
            )
        elif isinstance(exc, ImportError):
            what = f"an import ({what}): the simulation never imports"
        elif (
            frames and frames[-1].filename in self._files and not isinstance(exc, self._on_purpose)
        ):
            what = f"a stand-in raised {what} (in {frames[-1].name}): it does not model this call"
        elif isinstance(exc, TypeError) and self._names_a_standin(str(exc)):
            what = f"a stand-in does not take this call ({what})"
        elif self._standin_object(exc):
            what = f"a stand-in does not model this ({what})"
        else:
            return None
        function = f" in {inner.name}" if inner else ""
        return f"{where}: cannot run{function}: {what}"


class Divergence(Exception):
    """The ranks disagree at a collective (in SGLang: a hang or a torch error)."""


class Collective:
    """MIN all-reduce over the ranks of the TP group, through a barrier."""

    def __init__(self, ranks: int) -> None:
        self.barrier = threading.Barrier(ranks, timeout=BARRIER_TIMEOUT)
        self.slots: list[list[int]] = [[] for _ in range(ranks)]

    def __call__(self, rank: int, values: list[int]) -> list[int]:
        self.slots[rank] = list(values)
        self.barrier.wait()
        slots = [list(s) for s in self.slots]
        self.barrier.wait()  # everyone has read before anyone writes again
        if len({len(s) for s in slots}) > 1:
            sizes = ", ".join(f"rank {r}: {len(s)}" for r, s in enumerate(slots))
            raise Divergence(f"the ranks all-reduce different numbers of polls ({sizes})")
        return [min(column) for column in zip(*slots, strict=True)]


class LockstepWorld(ABC, Generic[ConfigT, SpecT, RankT, SnapshotT, TraceT]):
    """N ranks (``ranks``, made by the subclass) in lock step over ``config.requests``.

    A subclass gives what differs between the worlds: the barriers of the ranks' collectives
    (``_barriers``), the snapshot of a step (``_snapshot``), when the world has settled
    (``_settled``), the trace of a run (``_trace``), and the modules that are the simulation's
    own code (``SIMULATION``)."""

    SIMULATION: ClassVar[SimulationCode]

    ranks: list[RankT]

    def __init__(self, config: ConfigT, code: Target) -> None:
        self.config = config
        self._code = code  # the target's loaded code, where a failure is placed
        self.time = 0.0
        self.step = 0
        self.done = False
        self.specs: dict[str, SpecT] = {s.rid: s for s in config.requests}
        self.rooms = {s.rid: FIRST_ROOM + i for i, s in enumerate(config.requests)}
        self.by_room = {self.rooms[rid]: spec for rid, spec in self.specs.items()}
        self.step_barrier = threading.Barrier(
            config.ranks, action=self._end_step, timeout=BARRIER_TIMEOUT
        )
        self.snapshots: list[SnapshotT] = []
        self.failure: RankFailure | None = None
        self._lock = threading.Lock()

    @abstractmethod
    def _barriers(self) -> tuple[threading.Barrier, ...]:
        """The barriers of the ranks' collectives: a failing rank aborts them (and then the
        step barrier), so that no rank waits for it."""

    @abstractmethod
    def _snapshot(self) -> SnapshotT:
        """Every rank's queues at the end of this step."""

    @abstractmethod
    def _settled(self) -> bool:
        """Has every request ended on every rank (the run stops early)?"""

    @abstractmethod
    def _trace(self, events: list[Event]) -> TraceT:
        """The trace of the run, with every rank's ``events`` in order."""

    def run(self) -> TraceT:
        threads = [
            threading.Thread(
                target=self._loop, args=(rank,), name=f"sim-rank-{rank.rank}", daemon=True
            )
            for rank in self.ranks
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=1.0)
            if self.failure is not None:  # a rank stuck in the target's code is left behind
                break
        events = sorted(
            (e for rank in self.ranks for e in rank.events), key=lambda e: (e.step, e.rank)
        )
        return self._trace(events)

    def _loop(self, rank: RankT) -> None:
        try:
            while not self.done:
                rank.step()
                self.step_barrier.wait()
        except threading.BrokenBarrierError:
            if self.failure is None:  # no rank failed: one is stuck
                stuck = TimeoutError(
                    f"a rank did not finish step {self.step} within {BARRIER_TIMEOUT:g} s "
                    "(the ranks diverged: one waits in a collective another never joins, or "
                    "the target's code does not return)"
                )
                self._fail(rank, stuck)
        except BaseException as exc:
            self._fail(rank, exc)

    def _fail(self, rank: RankT, exc: BaseException) -> None:
        with self._lock:
            if self.failure is None:
                frames = traceback.extract_tb(exc.__traceback__)
                last = frames[-1] if frames else None
                where = f"{last.filename}:{last.lineno} in {last.name}" if last else "a barrier"
                gap = self.SIMULATION.gap(self._code, exc, frames)
                self.failure = RankFailure(rank.rank, self.time, exc, where, gap)
            self.done = True
        for barrier in (*self._barriers(), self.step_barrier):
            barrier.abort()

    def _end_step(self) -> None:
        """Barrier action: runs once per step, while every rank waits."""
        self.snapshots.append(self._snapshot())
        if self._settled() or self.time + self.config.step > self.config.horizon + EPS:
            self.done = True
            return
        self.time = round(self.time + self.config.step, 9)
        self.step += 1
