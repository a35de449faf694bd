"""The simulated world: N scheduler ranks running the target's code in lock step.

Each rank is a thread with its own copy of the target's classes (its own module namespaces, as
each rank is its own process in SGLang), its own clock and its own requests and senders. A rank
step is one iteration of SGLang's prefill event loop:

1. requests that arrived are added to the bootstrap queue (the target's ``add``, which creates
   the sender);
2. the target's ``pop_bootstrapped`` polls the bootstrap queue; popped requests join the
   waiting queue, which, unless the request pool is full (``pool_full``), is admitted: each
   request's prefill takes its ``prefill_s`` simulated seconds;
3. requests whose prefill finished go through the target's
   ``process_batch_result_disagg_prefill`` (the inflight-queue append, or optimistic prefill's
   requeue);
4. if the inflight queue is not empty, the target's ``process_disagg_prefill_inflight_queue``;
   with PP stages, one round of the PP consensus first, and the consensus travels the ring of
   stages one stage per round (``Rank._pp_round``).

Each request's sender is the target's own (``MooncakeKVSender``, or ``NixlKVSender`` for a
request scripted ``nixl``) on the rank's ``SimKVManager``, whose transport follows the
request's script.

Every ``poll_and_all_reduce*`` the target calls exchanges the local polls of all ranks through
a :class:`threading.Barrier` and MIN-reduces them, as ``dist.all_reduce(op=MIN)`` does. After
each step all ranks meet at a second barrier, whose action records a snapshot of every rank's
queues and advances the simulated clock by ``step`` seconds (the engine both worlds run on,
``lockstep``).
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any

from ... import sglang_names as names
from ...errors import LoadError
from .. import standins
from ..loader import EnvRegistry, Target, give_own_state
from ..lockstep import (
    BARRIER_TIMEOUT,
    EPS,
    Collective,
    Divergence,
    Event,
    LockstepConfig,
    LockstepRank,
    LockstepTrace,
    LockstepWorld,
    SimulationCode,
)
from ..spec import RequestSpec
from ..standins import Group, MetadataAllocator, SimReq
from . import standins as prefill_standins
from .standins import BootstrapQueueStandIn, SchedulerStandIn, ScriptedSender


@dataclass(frozen=True)
class WorldConfig(LockstepConfig[RequestSpec]):
    clock_offsets: tuple[float, ...] = ()  # per rank: added to every clock reading
    # How far into a step a rank handles arrivals and prefill results (where the sender is
    # created and the request enters the inflight queue), so that stamps fall between steps;
    # rank r's lag is ``lag + lag_spread * r / (ranks - 1)``.
    lag: float = 0.1
    lag_spread: float = 0.0
    # optimistic prefill before bootstrap (0.5.13+): attempts a request may make
    optimistic_attempts: int = 0
    # decode allocates on bootstrap, or after prefill ("prefill_complete", 0.5.22+)
    allocation_policy: str = "on_bootstrap"
    # (start, end) simulated seconds while the request pool is full: the waiting queue admits
    # nothing and ``req_to_token_pool.available_size()`` is 0
    pool_full: tuple[tuple[float, float], ...] = ()
    # Pipeline parallelism: with 2 or more, each rank is a PP stage (a TP group of its own)
    # and the stages agree, as SGLang's PP mixin does, on which requests have transferred
    pp_stages: int = 1
    # (start, end) simulated seconds while no rank polls the inflight queue (a scheduler
    # stall, 0.5.12+'s in-place pause_generation); the transfers go on meanwhile
    stalls: tuple[tuple[float, float], ...] = ()

    def stalled(self, now: float) -> bool:
        return any(start - EPS <= now < end - EPS for start, end in self.stalls)

    def lag_of(self, rank: int) -> float:
        return self.lag + (self.lag_spread * rank / (self.ranks - 1) if self.ranks > 1 else 0.0)


@dataclass(frozen=True)
class Snapshot:
    """Every rank's queues after one step (request ids, per rank)."""

    step: int
    time: float
    inflight: tuple[tuple[str, ...], ...]
    bootstrap: tuple[tuple[str, ...], ...]
    prefilling: tuple[tuple[str, ...], ...]

    def holds(self, rid: str, rank: int) -> bool:
        return any(rid in q[rank] for q in (self.inflight, self.bootstrap, self.prefilling))


@dataclass
class Trace(LockstepTrace[WorldConfig, Snapshot]):
    def entered_inflight(self, rid: str, rank: int = 0) -> Snapshot | None:
        return next((s for s in self.snapshots if rid in s.inflight[rank]), None)


class _Consensus:
    """PP stages passing their transferred request ids along: every stage gets the ids all
    stages reported (the intersection the last stage sends back to the first)."""

    def __init__(self, stages: int) -> None:
        self.barrier = threading.Barrier(stages, timeout=BARRIER_TIMEOUT)
        self.slots: list[list[str]] = [[] for _ in range(stages)]

    def __call__(self, stage: int, rids: list[str]) -> list[str]:
        self.slots[stage] = list(rids)
        self.barrier.wait()
        agreed = [rid for rid in self.slots[0] if all(rid in s for s in self.slots[1:])]
        self.barrier.wait()
        return agreed


class Rank(LockstepRank["World"]):
    """One scheduler rank; the :class:`standins.Context` of its stand-ins."""

    def __init__(self, world: World, index: int, target: Target) -> None:
        config = world.config
        super().__init__(world, index, config.clock_offsets[index] if config.clock_offsets else 0.0)
        self.env = dict(config.env)
        # the lag while the rank handles arrivals and prefill results
        self.handling_lag = config.lag_of(index)
        tp = config.ranks > 1 and config.pp_stages <= 1
        self.tp_group = Group(index, world.collective if tp else None)
        self.consensus_rounds: list[list[str]] = []  # PP: the consensus of every round so far
        self.cp_group = Group(index, None)
        self.recorders = standins.Recorders(target.pass_along, self)
        self.built = target.build(standins.for_rank(self), self.recorders.make, standins.no_import)
        allocator = MetadataAllocator()
        scheduler_cls: type[SchedulerStandIn] = type(
            "Scheduler", (self.built.mixin, SchedulerStandIn), _observed(self.built.mixin, self)
        )
        self.scheduler: Any = scheduler_cls.__new__(scheduler_cls)
        self.scheduler.sim_init(self, allocator)
        # the target's queue class first: its ``add`` is not one mypy can know
        queue_cls: Any = type(
            "PrefillBootstrapQueue", (self.built.bootstrap_queue, BootstrapQueueStandIn), {}
        )
        self.queue: Any = queue_cls.__new__(queue_cls)
        self.queue.sim_init(self, self.scheduler, allocator)
        _give_recorders(self.recorders, self.scheduler, self.queue)
        for owner, obj in (
            (target.mixin[1], self.scheduler),
            (target.bootstrap_queue[1], self.queue),
        ):
            give_own_state(obj, target.own_state.get(owner, {}))
        self.scheduler.disagg_prefill_bootstrap_queue = self.queue
        self._add_takes_heads = len(inspect.signature(queue_cls.add).parameters) > 2
        self.arrivals = sorted(config.requests, key=lambda s: s.arrival)
        self.prefilling: list[tuple[float, SimReq]] = []
        self.requeue_at: dict[str, float] = {}

    # standins.Context (with LockstepRank's now, world_time and record)

    def spec_of_room(self, room: int) -> RequestSpec | None:
        return self.world.by_room.get(room)

    @property
    def optimistic_attempts(self) -> int:
        return self.world.config.optimistic_attempts

    @property
    def allocation_policy(self) -> str:
        return self.world.config.allocation_policy

    def pool_full(self) -> bool:
        now = self.world.time
        return any(start - EPS <= now < end - EPS for start, end in self.world.config.pool_full)

    @property
    def bootstrap_timeout_default(self) -> int:
        default = self.world.target.bootstrap_timeout_default
        return 300 if default is None else default

    @property
    def env_registry(self) -> EnvRegistry | None:
        return self.world.target.env_registry

    def new_sender(self, *args: Any, **kwargs: Any) -> object:
        """The release's own sender class for the request: NIXL's for a request scripted
        ``nixl``, Mooncake's otherwise (a scripted sender only in a tree without one)."""
        room = kwargs["bootstrap_room"] if "bootstrap_room" in kwargs else args[2]
        spec = self.world.by_room[room]
        if spec.nixl or spec.backend == "nixl":
            if self.built.nixl_sender is None:
                raise standins.MissingStandIn(f"the target has no {names.NIXL_SENDER}")
            return self.built.nixl_sender(*args, **kwargs)
        if self.built.mooncake_sender is not None:
            return self.built.mooncake_sender(*args, **kwargs)
        return ScriptedSender(self, spec, *args, **kwargs)

    # one step of the prefill event loop

    def step(self) -> None:
        try:
            self._step()
        finally:
            self.lag = 0.0

    def _step(self) -> None:
        """One step. Once the rank has handled an arrival or a prefill result (``lag`` into the
        step), its clock stays there for the rest of the step: a rank's clock never goes back,
        so the inflight function that runs after the handling never reads an earlier time than
        a stamp the handling took."""
        now = self.world.time
        while self.arrivals and self.arrivals[0].arrival <= now + EPS:
            spec = self.arrivals.pop(0)
            req = SimReq(spec.rid, self.world.rooms[spec.rid])
            req._recorders = self.recorders
            self.lag = self.handling_lag
            self.queue.add(req, 8) if self._add_takes_heads else self.queue.add(req)
        self.scheduler.waiting_queue.extend(self.queue.pop_bootstrapped())
        if not self.pool_full():  # admit the waiting queue: each request's prefill starts
            for req in self.scheduler.waiting_queue:
                self.prefilling.append((now + self.world.specs[req.rid].prefill_s, req))
            self.scheduler.waiting_queue = []
        done = [req for at, req in self.prefilling if at <= now + EPS]
        requeued = [
            r for r in self.scheduler.disagg_prefill_inflight_queue if self._requeue(r, now)
        ]
        if requeued:
            self.scheduler.disagg_prefill_inflight_queue = [
                r for r in self.scheduler.disagg_prefill_inflight_queue if r not in requeued
            ]
            done += requeued
        if done:
            self.prefilling = [(at, req) for at, req in self.prefilling if at > now + EPS]
            batch, result = prefill_standins.prefill_batch(done)
            _give_recorders(self.recorders, batch, result)
            self.lag = self.handling_lag
            before = {id(r) for r in self.scheduler.disagg_prefill_inflight_queue}
            self.scheduler.process_batch_result_disagg_prefill(batch, result)
            for req in self.scheduler.disagg_prefill_inflight_queue:
                if id(req) not in before:
                    self.record("entered_inflight", req)
        if self.world.config.stalled(now):
            return
        if self.world.config.pp_stages > 1:
            self._pp_round()
        elif len(self.scheduler.disagg_prefill_inflight_queue) > 0:
            self.scheduler.process_disagg_prefill_inflight_queue()

    def _pp_round(self) -> None:
        """One round of SGLang's PP prefill loop (``event_loop_pp_disagg_prefill``, in the PP
        mixin outside the disaggregation package, so modelled here after its code, the same
        in 0.5.10 - 0.5.23). Before its inflight function, each stage reports the requests
        whose TP-reduced poll is terminal (``get_rids(..., [Success, Failed])``), intersected
        with what the stages before it reported (``_pp_pd_get_prefill_transferred_ids``). The
        last stage sends that consensus to the first (``_pp_pd_send_consensus_release_ids``),
        which passes it on, one stage per round: stage k's ``rids_to_check`` is the consensus
        of k + 1 rounds ago, and the target's own inflight function ends those requests by
        this stage's own poll."""
        queue = self.scheduler.disagg_prefill_inflight_queue
        polls = standins.poll_and_all_reduce_attn_cp_tp_group(
            [req.disagg_kv_sender for req in queue], self.cp_group, self.tp_group
        )
        terminal = (int(standins.KVPoll.Success), int(standins.KVPoll.Failed))
        local = [req.rid for req, poll in zip(queue, polls, strict=True) if poll in terminal]
        consensus = self.world.exchange(self.rank, local)
        for rid in consensus:
            if not any(rid in earlier for earlier in self.consensus_rounds):
                self.record("pp_agreed", rid)  # every stage reports its transfer ended
        self.consensus_rounds.append(consensus)
        hops = self.rank + 2  # this round's consensus, then one round per hop of the ring
        release = self.consensus_rounds[-hops] if len(self.consensus_rounds) >= hops else []
        if len(queue) > 0:
            self.scheduler.process_disagg_prefill_inflight_queue(release)

    def _requeue(self, req: SimReq, now: float) -> bool:
        """Is it time to hand ``req`` (waiting in the inflight queue) to the append site again?"""
        every = self.world.specs[req.rid].requeue_every
        if every is None:
            return False
        due = self.requeue_at.setdefault(req.rid, now + every)
        if now + EPS < due:
            return False
        self.requeue_at[req.rid] = now + every
        return True

    def rids(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        return (
            tuple(r.rid for r in self.scheduler.disagg_prefill_inflight_queue),
            tuple(r.rid for r in self.queue.queue),
            (
                *(r.rid for r in self.scheduler.waiting_queue),
                *(r.rid for _, r in self.prefilling),
            ),
        )


class World(LockstepWorld[WorldConfig, RequestSpec, Rank, Snapshot, Trace]):
    SIMULATION = SimulationCode(__name__, prefill_standins.__name__, on_purpose=(Divergence,))

    def __init__(self, config: WorldConfig, target: Target) -> None:
        super().__init__(config, target)
        self.target = target
        self.collective = Collective(config.ranks)
        self.exchange = _Consensus(config.ranks)
        self.ranks = [Rank(self, i, target) for i in range(config.ranks)]
        _check_self_reads(target, self.ranks[0])

    def _barriers(self) -> tuple[threading.Barrier, ...]:
        return (self.collective.barrier, self.exchange.barrier)

    def _snapshot(self) -> Snapshot:
        per_rank = [rank.rids() for rank in self.ranks]
        return Snapshot(
            self.step,
            self.time,
            tuple(r[0] for r in per_rank),
            tuple(r[1] for r in per_rank),
            tuple(r[2] for r in per_rank),
        )

    def _settled(self) -> bool:
        """Every request arrived and was streamed back on every rank, and no queue holds it."""
        if any(rank.arrivals for rank in self.ranks):
            return False
        last = self.snapshots[-1]
        for rank in self.ranks:
            streamed = {e.rid for e in rank.events if e.kind == "streamed"}
            if not set(self.specs) <= streamed:
                return False
            if any(last.holds(rid, rank.rank) for rid in self.specs):
                return False
        return True

    def _trace(self, events: list[Event]) -> Trace:
        return Trace(self.config, self.snapshots, events, self.failure, self.time)


# The target's own mixin methods whose every call the trace records (the method still runs):
# a scenario asks whether the path it is about really ran.
OBSERVED_METHODS = ("optimistic_release_and_requeue",)


def _observed(mixin: type, rank: Rank) -> dict[str, object]:
    """Wrappers recording each call of the target's OBSERVED_METHODS (``called`` events)."""
    wrappers: dict[str, object] = {}
    for name in OBSERVED_METHODS:
        method = getattr(mixin, name, None)
        if method is None:
            continue

        def wrapper(self: Any, req: Any, *args: Any, _m: Any = method, _n: str = name) -> Any:
            rank.record("called", req, _n)
            return _m(self, req, *args)

        wrappers[name] = wrapper
    return wrappers


def _give_recorders(recorders: standins.Recorders, *objects: object) -> None:
    """Let the strict stand-ins ``objects``, and the strict stand-ins they hold, answer an
    attribute the target only passes along with a Recorder."""
    for obj in objects:
        if not isinstance(obj, standins.Strict):
            continue
        obj._recorders = recorders
        held = [v for v in vars(obj).values() if isinstance(v, standins.Strict)]
        for value in held:
            if value._recorders is not recorders:
                _give_recorders(recorders, value)


def _check_self_reads(target: Target, rank: Rank) -> None:
    """Every ``self.X`` the loaded methods read must exist on the simulated objects (a
    Recorder, for an attribute the code only passes along)."""
    objects = {
        target.mixin[1]: rank.scheduler,
        target.bootstrap_queue[1]: rank.queue,
        f"{target.bootstrap_queue[1]}.scheduler": rank.scheduler,
    }
    for owner, reads in target.self_reads.items():
        for attr, (function, line) in sorted(reads.items()):
            if not hasattr(objects[owner], attr):
                cls, _, via = owner.partition(".")
                name = f"self.{via + '.' if via else ''}{attr}"
                verdict = target.attributes.get(attr)
                why = f" ({verdict.why})" if verdict is not None and verdict.why else ""
                raise LoadError(
                    f"{target.where(target.mixin[0], line)}: cannot load: {name} is needed by "
                    f"{cls}.{function} and has no stand-in{why}"
                )


def simulate(config: WorldConfig, target: Target) -> Trace:
    return World(config, target).run()
