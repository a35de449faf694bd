"""``simulate --seeds N``: seeded random fault schedules on both halves' worlds, with the
properties checked at every step of the run.

A seed draws, with ``random.Random`` seeded from it and nothing else, a schedule for each half
the tree has. On the prefill side (``schedule``): a few requests, some whose decode side
restarts and never answers (``transfer_s=None``), some whose transfer stalls, bootstrap pauses,
clock skew and lag between the ranks, PP stage lag (where the release has the PP consensus),
optimistic requeues (where it has optimistic prefill) and memory pressure (the request pool full
for a while). On the decode side (``decode_schedule``, wherever the tree has ``decode.py``): a
few requests on the release's receivers, some whose prefill restarts or vanishes after the KV
indices were sent, some whose transfer stalls, some whose room the prefill never registers (the
pending path, 0.5.10+) or registers late (the pending request is re-queued), retracted requests
(0.4.7.post1+) and decode memory full for a while (the prealloc queue under pressure), clock
skew between the ranks, and a scheduler pause with a request arriving during it. The same seed
gives the same schedules and, the worlds being deterministic, the same run: a failure printed
with its seed replays exactly (``simulate PATH --seed K``).

The properties (``violations``, ``decode_violations``), at each step ``t`` of the trace, for
each request with the deadline ``d`` (prefill: its last entry into the inflight queue, on
rank 0's clock, plus the inflight timeout; decode: the KV indices sent to its prefill, or its
entry into the pending queue, plus the waiting timeout):

* bounded: not waiting for its peer on any rank after the first step past ``d`` (and past a
  pause) plus ``LAG_STEPS`` steps;
* never early: not failed before ``d`` (decode: a request waiting only for decode memory has no
  deadline, and is never failed);
* unanimous: every rank ends it in the same step (PP stages: each a round after the one
  before, as the agreement travels the ring), the same way;
* a success never failed: a transfer that completes well before ``d`` is never failed (it
  completes its scripted transfer time after every rank sent its KV; one some rank never sent
  never completes);
* freed: a request a rank ended has its KV released there; on the decode side every
  request-pool and metadata slot is free once no request is left, and no request leaves every
  queue without an answer to its client (``told``).

A failing schedule is shrunk (``shrink``, ``shrink_decode``): requests and faults are taken
away while the same property still fails; the shrunk schedule is what a regression test keeps.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import sglang_names as names
from ..errors import SimulationGap
from .decode.loader import DecodeTarget
from .decode.world import (
    METADATA_SLOTS,
    SCRIPTED,
    DecodeConfig,
    DecodeSnapshot,
    DecodeTrace,
)
from .decode.world import simulate as run_decode_world
from .loader import Target
from .lockstep import EPS, LAG_STEPS, Event, LockstepConfig, lag_verdict
from .prefill.world import Trace, WorldConfig
from .prefill.world import simulate as run_world
from .spec import DecodeSpec, RequestSpec

TIMEOUT = 60.0  # the inflight timeout the schedules set (short, so a run stays short)
HORIZON = 3 * TIMEOUT
RETRY_HOOK_ENV = "SGLANG_TEST_FORCE_OPTIMISTIC_PREFILL_RETRY_PROB"
# a transfer that completes this long before its deadline must succeed
SUCCESS_MARGIN = 10.0


@dataclass(frozen=True)
class Violation:
    prop: str  # bounded, never-early, unanimous, success-kept, freed, told, crashed
    step: int
    time: float
    rid: str | None
    detail: str

    def line(self) -> str:
        who = f" {self.rid}" if self.rid else ""
        return f"{self.prop} at step {self.step} ({self.time:g} s){who}: {self.detail}"


def schedule(seed: int, target: Target, ranks: int) -> WorldConfig:
    """The fault schedule of ``seed`` for ``target`` (only the faults its code has paths for)."""
    rng = random.Random(seed)
    requests: list[RequestSpec] = []
    for i in range(rng.randint(1, 5)):
        kind = rng.choice(("healthy", "healthy", "decode-restart", "stall", "pause"))
        transfer: float | None = round(rng.uniform(0.2, 5.0), 2)
        bootstrap = 0.0
        if kind == "decode-restart":
            transfer = None
        elif kind == "stall":
            transfer = round(rng.uniform(20.0, 2 * TIMEOUT), 2)
        elif kind == "pause":
            bootstrap = round(rng.uniform(1.0, 20.0), 2)
        requests.append(
            RequestSpec(
                f"s{seed}-{i}-{kind}",
                arrival=round(rng.uniform(0.0, 10.0), 2),
                prefill_s=round(rng.uniform(0.2, 3.0), 2),
                bootstrap_s=bootstrap,
                transfer_s=transfer,
            )
        )
    env = {names.INFLIGHT_TIMEOUT_ENV: f"{TIMEOUT:g}"}
    skew = rng.choice((0.0, 0.0, rng.uniform(0.0, 1.0)))
    config = WorldConfig(
        tuple(requests),
        ranks,
        horizon=HORIZON,
        env=env,
        clock_offsets=tuple(-skew * r / max(ranks - 1, 1) for r in range(ranks)),
        lag_spread=round(rng.uniform(0.0, 0.2), 2),
    )
    if names.PP_CONSENSUS_PARAM in target.inflight_args and rng.random() < 0.3:
        config = dataclasses.replace(config, ranks=2, pp_stages=2, clock_offsets=())
    if "optimistic_release_and_requeue" in target.mixin_methods and rng.random() < 0.3:
        config = dataclasses.replace(
            config, optimistic_attempts=2, env={**env, RETRY_HOOK_ENV: "1"}
        )
    if rng.random() < 0.3:
        start = round(rng.uniform(0.0, 20.0), 2)
        config = dataclasses.replace(
            config, pool_full=((start, start + round(rng.uniform(5.0, 40.0), 2)),)
        )
    return config


def _end(event: Event | None) -> str:
    if event is None:
        return "never"
    how = "error" if event.detail.startswith("FINISH_ABORT") else "success"
    return f"{how} at {event.time:g} s"


def violations(trace: Trace) -> list[Violation]:
    """Every property the run breaks, the first step of each (per request and property)."""
    config = trace.config
    found: dict[tuple[str, str | None], Violation] = {}

    def add(prop: str, step: int, time: float, rid: str | None, detail: str) -> None:
        found.setdefault((prop, rid), Violation(prop, step, time, rid, detail))

    if trace.failure is not None and trace.failure.gap is None:
        failure = trace.failure
        add("crashed", 0, failure.time, None, f"{type(failure.error).__name__}: {failure.error}")
    ranks = range(config.ranks)
    for spec in config.requests:
        rid = spec.rid
        # its last entry into the inflight queue (rank 0's, the ranks enter it in one step): a
        # request that left the queue and came back starts a fresh deadline
        entry = next(
            (e for e in reversed(trace.events_of("entered_inflight", rid)) if e.rank == 0), None
        )
        streamed = {
            r: next((e for e in trace.events_of("streamed", rid) if e.rank == r), None)
            for r in ranks
        }
        _freed_and_unanimous(trace, rid, streamed, add)
        if entry is None:
            continue
        deadline = entry.time + config.lag_of(0) + TIMEOUT
        first = streamed[0]
        if first is not None and first.detail.startswith("FINISH_ABORT"):
            early = lag_verdict(first.time, deadline, config.step)
            if early is not None and first.time < deadline - EPS:
                add("never-early", first.step, first.time, rid, early)
            completes = _completes(trace, rid, spec.transfer_s)
            if completes < deadline - SUCCESS_MARGIN:
                add(
                    "success-kept",
                    first.step,
                    first.time,
                    rid,
                    f"failed although its transfer completes at about {completes:g} s, before "
                    f"its deadline ({deadline:g} s)",
                )
        bound = deadline + (LAG_STEPS + 1) * config.step
        for snapshot in trace.snapshots:  # the property at every step
            if snapshot.time > bound + EPS and any(snapshot.holds(rid, r) for r in ranks):
                add(
                    "bounded",
                    snapshot.step,
                    snapshot.time,
                    rid,
                    f"still waiting {snapshot.time - deadline:g} s after its deadline "
                    f"({deadline:g} s; the lag allowed is {LAG_STEPS} steps)"
                    + (
                        f", and at the end of the run ({trace.snapshots[-1].time:g} s)"
                        if any(trace.snapshots[-1].holds(rid, r) for r in ranks)
                        else ""
                    ),
                )
                break
    return sorted(found.values(), key=lambda v: (v.step, v.prop))


def _completes(trace: Trace, rid: str, transfer_s: float | None) -> float:
    """When the transfer of ``rid`` completes on every rank: ``transfer_s`` after the last rank
    sent its last chunk (the transport's script). A request some rank never sent has no
    transfer to complete (the target never started it, e.g. a parked request no PP stage
    unparks): there is no success to keep."""
    sent = [
        next((e.time for e in trace.events_of("kv_send", rid) if e.rank == r), None)
        for r in range(trace.config.ranks)
    ]
    if transfer_s is None or any(t is None for t in sent):
        return float("inf")
    return max(t for t in sent if t is not None) + transfer_s


def run_schedule(config: WorldConfig, target: Target) -> list[Violation]:
    trace = run_world(config, target)
    if trace.failure is not None and trace.failure.gap is not None:
        raise SimulationGap(trace.failure.gap)
    return violations(trace)


ConfigT = TypeVar("ConfigT", bound=LockstepConfig[Any])


def _shrunk(
    config: ConfigT,
    fails: Callable[[ConfigT], bool],
    faults: Callable[[ConfigT], list[ConfigT]],
) -> ConfigT:
    """Requests, then the ``faults`` simpler schedules, taken away one at a time, each kept
    away while ``fails`` still holds."""
    changed = True
    while changed:
        changed = False
        fewer: list[ConfigT] = [
            dataclasses.replace(config, requests=config.requests[:i] + config.requests[i + 1 :])
            for i in range(len(config.requests))
            if len(config.requests) > 1
        ]
        for candidate in [*fewer, *faults(config)]:
            if fails(candidate):
                config, changed = candidate, True
                break
    return config


def _prefill_faults(config: WorldConfig) -> list[WorldConfig]:
    simpler = []
    if config.pool_full:
        simpler.append(dataclasses.replace(config, pool_full=()))
    if config.optimistic_attempts or RETRY_HOOK_ENV in config.env:
        # the release's retry hook goes with optimistic prefill: describe() names them as one
        env = {k: v for k, v in config.env.items() if k != RETRY_HOOK_ENV}
        simpler.append(dataclasses.replace(config, optimistic_attempts=0, env=env))
    if any(config.clock_offsets):
        simpler.append(dataclasses.replace(config, clock_offsets=()))
    if config.lag_spread:
        simpler.append(dataclasses.replace(config, lag_spread=0.0))
    return simpler


def shrink(config: WorldConfig, target: Target, prop: str) -> WorldConfig:
    """A smaller prefill schedule that still breaks ``prop``."""
    return _shrunk(
        config,
        lambda c: any(v.prop == prop for v in run_schedule(c, target)),
        _prefill_faults,
    )


def describe(config: WorldConfig) -> str:
    """The schedule in one line (what a regression test copies)."""
    parts = [
        f"{s.rid}: arrival {s.arrival:g} s, prefill {s.prefill_s:g} s, bootstrap "
        f"{s.bootstrap_s:g} s, transfer "
        + ("never (decode restarted)" if s.transfer_s is None else f"{s.transfer_s:g} s")
        for s in config.requests
    ]
    faults = []
    if any(config.clock_offsets):
        faults.append(f"clock skew {max(abs(o) for o in config.clock_offsets):.2f} s")
    if config.lag_spread:
        faults.append(f"lag spread {config.lag_spread:g} s")
    if config.pp_stages > 1:
        faults.append(f"{config.pp_stages} PP stages")
    if config.optimistic_attempts or RETRY_HOOK_ENV in config.env:
        faults.append("optimistic requeues")
    for start, end in config.pool_full:
        faults.append(f"memory pressure {start:g}-{end:g} s")
    return "; ".join(parts + faults)


# -- the decode side ---------------------------------------------------------------------------


def decode_schedule(seed: int, target: DecodeTarget, ranks: int) -> DecodeConfig:
    """The decode-side fault schedule of ``seed`` for ``target`` (only the faults its code has
    paths for: the pending path on 0.5.10+, retraction on 0.4.7.post1+, and, where the tree's
    prefill has optimistic prefill (0.5.13+), requests its prefill yielded and re-prefilled)."""
    rng = random.Random(f"decode:{seed}")  # a stream of its own: the prefill schedule is kept
    backends = sorted(target.receivers) or [SCRIPTED]  # no receiver class: a scripted one
    pends = target.pends and rng.random() < 0.4
    kinds = ["healthy", "healthy", "prefill-gone", "stall"]
    if pends:
        kinds += ["never-registered", "registered-late"]
    if target.retracts:
        kinds.append("retracted")
    requests: list[DecodeSpec] = []

    def request(kind: str, arrival: float) -> DecodeSpec:
        transfer: float | None = round(rng.uniform(0.5, 5.0), 2)
        if kind == "prefill-gone":
            transfer = None
        elif kind == "stall":
            transfer = round(rng.uniform(20.0, 2 * TIMEOUT), 2)
        return DecodeSpec(
            f"d{seed}-{len(requests)}-{kind}",
            backend=rng.choice(backends),
            arrival=arrival,
            transfer_s=transfer,
            registered=kind != "never-registered",
            retracted=kind == "retracted",
            register_s=round(rng.uniform(5.0, 40.0), 2) if kind == "registered-late" else 0.0,
        )

    for _ in range(rng.randint(1, 5)):
        requests.append(request(rng.choice(kinds), round(rng.uniform(0.0, 10.0), 2)))
    skew = rng.choice((0.0, 0.0, rng.uniform(0.0, 1.0)))
    memory: tuple[tuple[float, float], ...] = ()
    if rng.random() < 0.3 or any(s.retracted for s in requests):
        start = round(rng.uniform(0.0, 20.0), 2)
        memory = ((start, start + round(rng.uniform(5.0, 40.0), 2)),)
    stalls: tuple[tuple[float, float], ...] = ()
    if rng.random() < 0.3:
        start = round(rng.uniform(0.0, 40.0), 2)
        stalls = ((start, start + round(rng.uniform(5.0, 30.0), 2)),)
        kind = rng.choice(("healthy", "prefill-gone"))
        requests.append(request(kind, round(rng.uniform(*stalls[0]), 2)))  # during the pause
    if target.prefill_requeues:
        # its own stream, so that what was drawn above stays what it was for every seed
        requeue = random.Random(f"decode-requeue:{seed}")
        requests = [_requeued(spec, requeue) for spec in requests]
    return DecodeConfig(
        tuple(requests),
        ranks,
        horizon=HORIZON,
        env={names.WAITING_TIMEOUT_ENV: f"{TIMEOUT:g}"},
        memory_full=memory,
        prefill_dp_size=2 if pends else 1,
        clock_offsets=tuple(-skew * r / max(ranks - 1, 1) for r in range(ranks)),
        stalls=stalls,
    )


def _requeued(spec: DecodeSpec, rng: random.Random) -> DecodeSpec:
    """``spec``, its prefill's optimistic prefill yielding it 1-2 times (30% of the requests
    whose prefill answers): each yield re-prefills it from scratch, 5-30 s, before the KV
    reaches the decode (the decode's receiver waits on, its indices long sent)."""
    if spec.transfer_s is None or not spec.registered or spec.retracted or spec.register_s:
        return spec
    if rng.random() >= 0.3:
        return spec
    times = rng.randint(1, 2)
    delay = round(sum(rng.uniform(5.0, 30.0) for _ in range(times)), 2)
    return dataclasses.replace(
        spec, transfer_s=round(spec.transfer_s + delay, 2), requeues=times, requeue_s=delay
    )


def _waits(snapshot: DecodeSnapshot, rid: str, rank: int) -> bool:
    """Does ``rank`` hold ``rid`` waiting for its prefill (prealloc, pending or transfer
    queue; not retracted, which waits for decode memory, nor decoding)?"""
    return any(rid in q[rank] for q in (snapshot.prealloc, snapshot.pending, snapshot.transfer))


def _after_pauses(config: DecodeConfig, at: float) -> float:
    """The first time at or after ``at`` at which the ranks run (not inside a pause)."""
    moved = True
    while moved:
        moved = False
        for start, end in config.stalls:
            if start - EPS <= at < end - EPS:
                at, moved = end, True
    return at


def decode_violations(trace: DecodeTrace) -> list[Violation]:
    """Every property the decode run breaks, the first step of each (per request and
    property)."""
    config = trace.config
    found: dict[tuple[str, str | None], Violation] = {}

    def add(prop: str, step: int, time: float, rid: str | None, detail: str) -> None:
        found.setdefault((prop, rid), Violation(prop, step, time, rid, detail))

    if trace.failure is not None and trace.failure.gap is None:
        failure = trace.failure
        add("crashed", 0, failure.time, None, f"{type(failure.error).__name__}: {failure.error}")
    ranks = range(config.ranks)
    last = trace.snapshots[-1] if trace.snapshots else None
    for spec in config.requests:
        rid = spec.rid
        streamed = {
            r: next((e for e in trace.events_of("streamed", rid) if e.rank == r), None)
            for r in ranks
        }
        _freed_and_unanimous(trace, rid, streamed, add)
        if last is not None and trace.failure is None and spec.arrival < last.time - EPS:
            for r in ranks:
                if streamed[r] is None and last.where(rid, r) is None:
                    add(
                        "told",
                        last.step,
                        last.time,
                        rid,
                        f"rank {r}: it left every queue without an answer to its client",
                    )
        sent = next((e for e in trace.events_of("indices_sent", rid) if e.rank == 0), None)
        pending = next((s for s in trace.snapshots if rid in s.pending[0]), None)
        bases = [x.time for x in (sent, pending) if x is not None]
        first = streamed[0]
        if first is not None and first.detail.startswith("FINISH_ABORT"):
            if not bases:
                add(
                    "never-early",
                    first.step,
                    first.time,
                    rid,
                    f"failed at {first.time:g} s while it waited for decode memory (its KV "
                    "indices never sent: no peer to wait for)",
                )
            else:
                deadline = min(bases) + TIMEOUT
                early = lag_verdict(first.time, deadline, config.step)
                if early is not None and first.time < deadline - EPS:
                    add("never-early", first.step, first.time, rid, early)
            if sent is not None and spec.transfer_s is not None:
                completes = sent.time + spec.transfer_s
                if completes < sent.time + TIMEOUT - SUCCESS_MARGIN:
                    add(
                        "success-kept",
                        first.step,
                        first.time,
                        rid,
                        f"failed although its transfer completes at about {completes:g} s, "
                        f"before its deadline ({sent.time + TIMEOUT:g} s)",
                    )
        if not bases:
            continue
        deadline = (sent.time if sent is not None else max(bases)) + TIMEOUT
        bound = _after_pauses(config, deadline) + (LAG_STEPS + 1) * config.step
        for snapshot in trace.snapshots:  # the property at every step
            if snapshot.time > bound + EPS and any(_waits(snapshot, rid, r) for r in ranks):
                where = next(filter(None, (snapshot.where(rid, r) for r in ranks)), "queued")
                end = trace.snapshots[-1]
                still = any(_waits(end, rid, r) for r in ranks)
                add(
                    "bounded",
                    snapshot.step,
                    snapshot.time,
                    rid,
                    f"still waiting ({where}) {snapshot.time - deadline:g} s after its deadline "
                    f"({deadline:g} s; the lag allowed is {LAG_STEPS} steps)"
                    + (f", and at the end of the run ({end.time:g} s)" if still else ""),
                )
                break
    if (
        last is not None
        and trace.failure is None
        and not any(last.where(s.rid, r) for s in config.requests for r in ranks)
    ):
        in_use = [METADATA_SLOTS - free for free in last.metadata_free]
        if any(last.req_slots) or any(in_use):
            add(
                "freed",
                last.step,
                last.time,
                None,
                f"no request left, but request-pool slots in use {list(last.req_slots)} and "
                f"metadata slots in use {in_use}",
            )
    return sorted(found.values(), key=lambda v: (v.step, v.prop))


def _freed_and_unanimous(
    trace: DecodeTrace | Trace,
    rid: str,
    streamed: dict[int, Event | None],
    add: Callable[[str, int, float, str | None, str], None],
) -> None:
    """``freed`` (a rank that ended ``rid`` released the KV it locked there) and
    ``unanimous`` (every rank ended it in the same step, the same way)."""
    for r, event in streamed.items():
        locked = [e for e in trace.events_of("kv_locked", rid) if e.rank == r]
        released = [e for e in trace.events_of("kv_released", rid) if e.rank == r]
        if (
            (isinstance(trace, Trace) or locked)  # a decode request may never have locked KV
            and event is not None
            and not any(e.step <= event.step for e in released)
        ):
            add("freed", event.step, event.time, rid, f"rank {r} ended it, KV not released")
    ended = [e for e in streamed.values() if e is not None]
    # PP stages learn the agreement one round after another (the ring): stage k ends a request
    # up to k rounds after the first; TP ranks end it in the same step
    rounds = trace.config.pp_stages - 1 if isinstance(trace, Trace) else 0
    if ended and (
        len(ended) < len(streamed)
        or max(e.step for e in ended) - min(e.step for e in ended) > rounds
        or len({e.detail.startswith("FINISH_ABORT") for e in ended}) > 1
    ):
        earliest = min(ended, key=lambda e: e.step)
        each = ", ".join(f"rank {r}: {_end(e)}" for r, e in streamed.items())
        add("unanimous", earliest.step, earliest.time, rid, f"ranks end it differently ({each})")


def run_decode_schedule(config: DecodeConfig, target: DecodeTarget) -> list[Violation]:
    trace = run_decode_world(config, target)
    if trace.failure is not None and trace.failure.gap is not None:
        raise SimulationGap(trace.failure.gap)
    return decode_violations(trace)


def _decode_faults(config: DecodeConfig) -> list[DecodeConfig]:
    simpler = []
    for i, spec in enumerate(config.requests):
        if spec.requeues and spec.transfer_s is not None:  # the same request, never yielded
            transfer = round(spec.transfer_s - spec.requeue_s, 2)
            plain = dataclasses.replace(spec, transfer_s=transfer, requeues=0, requeue_s=0.0)
            requests = (*config.requests[:i], plain, *config.requests[i + 1 :])
            simpler.append(dataclasses.replace(config, requests=requests))
    if config.memory_full:
        simpler.append(dataclasses.replace(config, memory_full=()))
    if config.stalls:
        simpler.append(dataclasses.replace(config, stalls=()))
    if any(config.clock_offsets):
        simpler.append(dataclasses.replace(config, clock_offsets=()))
    if config.prefill_dp_size > 1:
        simpler.append(dataclasses.replace(config, prefill_dp_size=1))
    return simpler


def shrink_decode(config: DecodeConfig, target: DecodeTarget, prop: str) -> DecodeConfig:
    """A smaller decode schedule that still breaks ``prop``."""
    return _shrunk(
        config,
        lambda c: any(v.prop == prop for v in run_decode_schedule(c, target)),
        _decode_faults,
    )


def describe_decode(config: DecodeConfig) -> str:
    """The decode schedule in one line (what a regression test copies)."""
    parts = []
    for s in config.requests:
        part = f"{s.rid}: {s.backend}, arrival {s.arrival:g} s, transfer " + (
            "never (prefill gone)" if s.transfer_s is None else f"{s.transfer_s:g} s"
        )
        if not s.registered:
            part += ", room never registered"
        elif s.register_s:
            part += f", room registered after {s.register_s:g} s"
        if s.retracted:
            part += ", retracted"
        if s.requeues:
            part += f" after {s.requeues} optimistic requeue(s) of its prefill ({s.requeue_s:g} s)"
        parts.append(part)
    faults = []
    if any(config.clock_offsets):
        faults.append(f"clock skew {max(abs(o) for o in config.clock_offsets):.2f} s")
    if config.prefill_dp_size > 1:
        faults.append(f"prefill DP {config.prefill_dp_size}")
    for start, end in config.memory_full:
        faults.append(f"decode memory full {start:g}-{end:g} s")
    for start, end in config.stalls:
        faults.append(f"pause {start:g}-{end:g} s")
    return "; ".join(parts + faults)


@dataclass(frozen=True)
class SeedResult:
    seed: int
    schedule: str
    violations: tuple[Violation, ...]
    shrunk: str | None = None  # the shrunk schedule of the first violation
    side: str = "prefill"  # the half whose world ran the schedule: prefill or decode


def run_seeds(
    target: Target | None,
    seeds: Sequence[int],
    ranks: int,
    decode: DecodeTarget | None = None,
) -> list[SeedResult]:
    """Each seed's schedules: the prefill one on ``target``, the decode one on ``decode``
    (each where given), in seed order, prefill first."""
    results: list[SeedResult] = []
    for seed in seeds:
        if target is not None:
            config = schedule(seed, target, ranks)
            found = tuple(run_schedule(config, target))
            shrunk = describe(shrink(config, target, found[0].prop)) if found else None
            results.append(SeedResult(seed, describe(config), found, shrunk))
        if decode is not None:
            dconfig = decode_schedule(seed, decode, ranks)
            found = tuple(run_decode_schedule(dconfig, decode))
            dshrunk = (
                describe_decode(shrink_decode(dconfig, decode, found[0].prop)) if found else None
            )
            results.append(
                SeedResult(seed, describe_decode(dconfig), found, dshrunk, side="decode")
            )
    return results
