"""The decode half's world: the release's own decode queues and KV receivers on N simulated
ranks in lock step (the engine both halves run on, ``lockstep``).

A rank step is one iteration of SGLang's decode event loop: arrivals (``add``),
``process_decode_queue``, the running batch (a transferred request decodes for one second and
finishes). Every ``poll_and_all_reduce`` exchanges the ranks' polls through a barrier and
MIN-reduces them, as on the prefill side (``lockstep.Collective``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ...sglang_names import (
    DECODE_PATH,
)
from .. import loader, lockstep, standins
from ..lockstep import EPS, Collective, Divergence, Event
from ..spec import DecodeSpec
from ..standins import (
    FINISH_LENGTH,
    Group,
    MetadataAllocator,
    MissingStandIn,
    SimReq,
)
from . import standins as decode_standins
from .loader import PREALLOC_QUEUE, RECEIVERS, TRANSFER_QUEUE, DecodeTarget
from .standins import (
    DISAGG_ARGS,
    PREFILL_SERVER,
    REGISTRY,
    DecodeKVManager,
    DecodeReq,
    DecodeSchedulerStandIn,
    DecodeTreeCache,
    MetadataBuffers,
    PrefillInfo,
    QueueState,
    ReceiverNetwork,
    ReqToTokenPool,
    ScriptedReceiver,
)

# the backend of a request in a tree with no receiver class: a ScriptedReceiver
SCRIPTED = "scripted"

# -- the world -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeConfig(lockstep.LockstepConfig[DecodeSpec]):
    # (start, end) simulated seconds while decode memory is full
    memory_full: tuple[tuple[float, float], ...] = ()
    # the prefill's DP layout as its bootstrap server reports it (0.5.10+): with dp_size > 1
    # and no follow_bootstrap_room, the decode asks /query_dp_ranks for each room
    prefill_dp_size: int = 1
    lag: float = 0.1
    clock_offsets: tuple[float, ...] = ()  # per rank: added to every clock reading
    # (start, end) simulated seconds while no rank runs its event loop (a scheduler stall,
    # pause_generation); requests still arrive and the prefill's transfers go on
    stalls: tuple[tuple[float, float], ...] = ()

    def stalled(self, now: float) -> bool:
        return any(start - EPS <= now < end - EPS for start, end in self.stalls)


@dataclass(frozen=True)
class DecodeSnapshot:
    step: int
    time: float
    prealloc: tuple[tuple[str, ...], ...]
    transfer: tuple[tuple[str, ...], ...]
    retracted: tuple[tuple[str, ...], ...]
    pending: tuple[tuple[str, ...], ...]
    running: tuple[tuple[str, ...], ...]
    req_slots: tuple[int, ...]  # request-pool slots in use, per rank
    metadata_free: tuple[int, ...]  # free metadata slots, per rank

    def where(self, rid: str, rank: int) -> str | None:
        """The queues holding ``rid`` on ``rank`` ("prealloc/pending"), or None."""
        places = [
            name
            for name, queues in (
                ("prealloc", self.prealloc),
                ("pending", self.pending),
                ("transfer", self.transfer),
                ("retracted", self.retracted),
                ("running", self.running),
            )
            if rid in queues[rank]
        ]
        return "/".join(places) or None


@dataclass
class DecodeTrace(lockstep.LockstepTrace[DecodeConfig, DecodeSnapshot]):
    metadata_slots: int


METADATA_SLOTS = 64
REQ_SLOTS = 64


class DecodeRank(lockstep.LockstepRank["DecodeWorld"]):
    """One decode scheduler rank (a thread), with its own copy of the target's classes."""

    def __init__(self, world: DecodeWorld, index: int) -> None:
        config = world.config
        offsets = config.clock_offsets
        super().__init__(world, index, offsets[index] if index < len(offsets) else 0.0)
        target = world.target
        self.env = dict(config.env)
        self.tp_group = Group(index, world.collective if config.ranks > 1 else None)
        self.cp_group = Group(index, None)
        self.recorders = standins.Recorders(target.code.pass_along, cast(Any, self))
        namespaces = target.code.namespaces(
            standins.for_rank(self, REGISTRY), self.recorders.make, standins.no_import
        )
        decode = namespaces[DECODE_PATH]
        self.tree_cache = DecodeTreeCache(self)
        self.req_pool = ReqToTokenPool(self, REQ_SLOTS)
        self.metadata_allocator = MetadataAllocator(METADATA_SLOTS)
        self.metadata_buffers = MetadataBuffers(target.get_buf)
        self.kv_used: set[str] = set()
        self.receivers: dict[str, type] = {}
        for backend, (rel, name) in target.receivers.items():
            cls = namespaces[rel][name]
            assert isinstance(cls, type)
            given = {
                key: value() if callable(value) else value
                for key, value in target.class_defaults[backend].items()
            }
            given |= {"sim_arity": target.arity[backend], "sim_manager": None}
            self.receivers[backend] = type(name, (cls, ReceiverNetwork), given)
            common = namespaces[rel].get("CommonKVReceiver")
            if isinstance(common, type):  # its static network look-up, called on the class
                common.query_prefill_dp_ranks = staticmethod(self.query_dp_ranks)  # type: ignore[attr-defined]
        # one KV manager per backend, as each backend has its own (the queue's is the first)
        self.kv_managers = {
            backend: self._manager(target.manager_waiting_timeout[backend])
            for backend in self.receivers
        } or {SCRIPTED: self._manager(False)}
        for backend, receiver in self.receivers.items():
            receiver.sim_manager = self.kv_managers[backend]  # type: ignore[attr-defined]
        self.kv_manager = next(iter(self.kv_managers.values()))
        scheduler_cls: Any = type(
            "Scheduler", (_class(decode, target.mixin), DecodeSchedulerStandIn), {}
        )
        self.scheduler = scheduler_cls.__new__(scheduler_cls)
        self.scheduler.sim_init(self)
        prealloc_cls: Any = type(PREALLOC_QUEUE, (_class(decode, PREALLOC_QUEUE), QueueState), {})
        transfer_cls: Any = type(TRANSFER_QUEUE, (_class(decode, TRANSFER_QUEUE), QueueState), {})
        self.prealloc = prealloc_cls.__new__(prealloc_cls)
        self.transfer = transfer_cls.__new__(transfer_cls)
        self.prealloc.sim_init(self)
        self.transfer.sim_init(self)
        for name, queue in ((PREALLOC_QUEUE, self.prealloc), (TRANSFER_QUEUE, self.transfer)):
            loader.give_init_literals(queue, target.init_literals.get(name, {}))
            loader.give_own_state(queue, target.own_state.get(name, {}))
        self.prealloc.transfer_queue = self.transfer
        self.scheduler.disagg_decode_prealloc_queue = self.prealloc
        self.scheduler.disagg_decode_transfer_queue = self.transfer
        self.scheduler.req_to_token_pool = self.req_pool
        for obj in (self.scheduler, self.prealloc, self.transfer, *self.kv_managers.values()):
            obj._recorders = self.recorders
        self.arrivals = sorted(config.requests, key=lambda s: s.arrival)
        self.running: list[tuple[float, SimReq]] = []

    def _manager(self, has_waiting_timeout: bool) -> DecodeKVManager:
        """A backend's KV manager, with the prefill's layout and this rank's mapping onto it
        (one prefill TP rank per decode rank) as try_ensure_parallel_info leaves them
        (0.5.10+), and ``waiting_timeout`` where the release's manager sets one."""
        config = self.world.config
        waiting = self.env.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "300")
        manager = DecodeKVManager(self, int(waiting) if has_waiting_timeout else None)
        manager.prefill_info_table[PREFILL_SERVER] = PrefillInfo(
            "prefill_info",
            dp_size=config.prefill_dp_size,
            tp_size=config.ranks,
            pp_size=1,
            cp_size=1,
            attn_tp_size=config.ranks,
            attn_cp_size=1,
            page_size=1,
            kv_cache_dtype=None,
            follow_bootstrap_room=config.prefill_dp_size == 1,
            target_tp_rank=self.rank,
            target_tp_ranks=[self.rank],
            target_cp_ranks=[0],
            target_pp_ranks=[0],
            required_dst_info_num=1,
            required_prefill_response_num=1,
            decode_allocation_policy=DISAGG_ARGS["disaggregation_decode_allocation_policy"],
        )
        return manager

    # the stand-ins' context (with LockstepRank's now, world_time and record)

    def rid_of(self, room: int) -> str | None:
        spec = self.world.by_room.get(room)
        return spec.rid if spec else None

    def script(self, room: int) -> DecodeSpec | None:
        return self.world.by_room.get(room)

    def memory_full(self) -> bool:
        now = self.world.time
        return any(a - EPS <= now < b - EPS for a, b in self.world.config.memory_full)

    def new_receiver(self, *args: Any, **kwargs: Any) -> object:
        room: Any = kwargs.get("bootstrap_room", args[2] if len(args) > 2 else None)
        spec = self.world.by_room[int(room)]
        if spec.backend == SCRIPTED and not self.receivers:
            return ScriptedReceiver(self, spec, self.world.target.pends, *args, **kwargs)
        cls = self.receivers.get(spec.backend)
        if cls is None:
            raise MissingStandIn(f"the target has no {RECEIVERS[spec.backend][1]}")
        if "mgr" in kwargs:  # the backend's own manager
            kwargs["mgr"] = self.kv_managers[spec.backend]
        elif args:
            args = (self.kv_managers[spec.backend], *args[1:])
        return cls(*args, **kwargs)

    def query_dp_ranks(self, bootstrap_addr: str, rooms: list[int]) -> dict[str, int]:
        """``/query_dp_ranks`` of the prefill's bootstrap server: the rooms it registered."""
        found = {}
        for room in rooms:
            spec = self.world.by_room.get(room)
            if (
                spec is not None
                and spec.registered
                and self.world.time >= spec.arrival + spec.register_s - EPS
            ):
                found[str(room)] = room % self.world.config.prefill_dp_size
        return found

    def write_metadata(self, room: int) -> None:
        for entry in self.transfer.queue:
            if entry.req.bootstrap_room == room:
                self.metadata_buffers.rooms[entry.metadata_buffer_index] = room

    def alloc_kv(self, req: SimReq) -> None:
        self.req_pool.used[req.rid] = len(self.req_pool.used)
        self.kv_used.add(req.rid)
        self.record("kv_locked", req)

    def free_kv(self, req: SimReq) -> None:
        self.req_pool.used.pop(req.rid, None)
        if req.rid in self.kv_used:
            self.kv_used.discard(req.rid)
            self.record("kv_released", req)

    # one iteration of the decode event loop

    def step(self) -> None:
        now = self.world.time
        while self.arrivals and self.arrivals[0].arrival <= now + EPS:
            spec = self.arrivals.pop(0)
            req = DecodeReq(spec.rid, self.world.rooms[spec.rid])
            req._recorders = self.recorders
            self.lag = self.world.config.lag
            try:
                if spec.retracted:
                    self.alloc_kv(req)  # it decoded before it was retracted
                    self.free_kv(req)  # ... and gave its KV back (offloaded)
                    self.prealloc.add(req, is_retracted=True)
                else:
                    self.prealloc.add(req)
            finally:
                self.lag = 0.0
        if self.world.config.stalled(now):
            return
        self.scheduler.process_decode_queue()
        for waiting in self.scheduler.waiting_queue:
            req = waiting
            self.running.append((now + self.world.specs[req.rid].decode_s, req))
            self.record("decoding", req)
        self.scheduler.waiting_queue = []
        done = [req for at, req in self.running if at <= now + EPS]
        if done:
            self.running = [(at, r) for at, r in self.running if at > now + EPS]
            for finished in done:
                finished.finished_reason = FINISH_LENGTH(len(finished.output_ids))
                self.scheduler.stream_output([finished])
                self.tree_cache.cache_finished_req(finished)

    def rids(self) -> tuple[tuple[str, ...], ...]:
        return (
            tuple(_rid(d) for d in self.prealloc.queue),
            tuple(_rid(d) for d in self.transfer.queue),
            tuple(_rid(r) for r in self.prealloc.retracted_queue),
            tuple(
                _rid(d)
                for name in self.world.target.pending_lists
                for d in getattr(self.prealloc, name)
            ),
            tuple(r.rid for _, r in self.running),
        )


def _rid(entry: Any) -> str:
    """The rid of a queue's entry: a decode request (``.req``) or, in a fork's queue that
    holds them bare, the request itself."""
    return str(entry.rid if isinstance(entry, SimReq) else entry.req.rid)


def _class(namespace: Mapping[str, object], name: str) -> type:
    value = namespace[name]
    assert isinstance(value, type)
    return value


class DecodeWorld(
    lockstep.LockstepWorld[DecodeConfig, DecodeSpec, DecodeRank, DecodeSnapshot, DecodeTrace]
):
    SIMULATION = lockstep.SimulationCode(
        __name__, decode_standins.__name__, on_purpose=(Divergence,)
    )

    def __init__(self, config: DecodeConfig, target: DecodeTarget) -> None:
        super().__init__(config, target.code)
        self.target = target
        self.collective = Collective(config.ranks)
        self.ranks = [DecodeRank(self, i) for i in range(config.ranks)]

    def _barriers(self) -> tuple[threading.Barrier, ...]:
        return (self.collective.barrier,)

    def _snapshot(self) -> DecodeSnapshot:
        per_rank = [rank.rids() for rank in self.ranks]
        column = [tuple(r[i] for r in per_rank) for i in range(5)]
        return DecodeSnapshot(
            self.step,
            self.time,
            column[0],
            column[1],
            column[2],
            column[3],
            column[4],
            tuple(len(rank.req_pool.used) for rank in self.ranks),
            tuple(rank.metadata_allocator.available_size() for rank in self.ranks),
        )

    def _settled(self) -> bool:
        if any(rank.arrivals for rank in self.ranks):
            return False
        for rank in self.ranks:
            streamed = {e.rid for e in rank.events if e.kind == "streamed"}
            if not set(self.specs) <= streamed or any(rank.rids()):
                return False
        return True

    def _trace(self, events: list[Event]) -> DecodeTrace:
        return DecodeTrace(
            self.config, self.snapshots, events, self.failure, self.time, METADATA_SLOTS
        )


def simulate(config: DecodeConfig, target: DecodeTarget) -> DecodeTrace:
    return DecodeWorld(config, target).run()
