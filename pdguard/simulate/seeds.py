"""``simulate --seeds N``: seeded random fault schedules on the prefill world, with the
properties checked at every step of the run.

A seed draws, with ``random.Random(seed)`` and nothing else, a schedule: a few requests, some
whose decode side restarts and never answers (``transfer_s=None``), some whose transfer stalls,
bootstrap pauses, clock skew and lag between the ranks, PP stage lag (where the release has the
PP consensus), optimistic requeues (where it has optimistic prefill) and memory pressure (the
request pool full for a while). The same seed gives the same schedule and, the world being
deterministic, the same run: a failure printed with its seed replays exactly
(``simulate PATH --seed K``).

The properties (``violations``), at each step ``t`` of the trace, for each request that entered
the inflight queue at ``e`` with the deadline ``d = e + timeout``:

* bounded: not held by any rank after the first step past ``d`` plus ``LAG_STEPS`` steps;
* never early: not failed before ``d``;
* unanimous: every rank ends it in the same step, the same way;
* a success never failed: a transfer that completes well before ``d`` is never failed;
* freed: a request a rank ended has its KV released there.

A failing schedule is shrunk (``shrink``): requests and faults are taken away while the same
property still fails; the shrunk schedule is what a regression test keeps.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from .. import sglang_names as names
from ..errors import SimulationGap
from .loader import Target
from .lockstep import EPS, LAG_STEPS, Event, lag_verdict
from .prefill.world import Trace, WorldConfig
from .prefill.world import simulate as run_world
from .spec import RequestSpec

TIMEOUT = 60.0  # the inflight timeout the schedules set (short, so a run stays short)
HORIZON = 3 * TIMEOUT
RETRY_HOOK_ENV = "SGLANG_TEST_FORCE_OPTIMISTIC_PREFILL_RETRY_PROB"
# a transfer that completes this long before its deadline must succeed
SUCCESS_MARGIN = 10.0


@dataclass(frozen=True)
class Violation:
    prop: str  # bounded, never-early, unanimous, success-kept, freed, crashed
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
        entry = trace.entered_inflight(rid)
        streamed = {
            r: next((e for e in trace.events_of("streamed", rid) if e.rank == r), None)
            for r in ranks
        }
        for r, event in streamed.items():
            if event is not None and not any(
                e.rank == r and e.step <= event.step for e in trace.events_of("kv_released", rid)
            ):
                add("freed", event.step, event.time, rid, f"rank {r} ended it, KV not released")
        ended = [e for e in streamed.values() if e is not None]
        if ended and (
            len(ended) < len(streamed)
            or len({e.step for e in ended}) > 1
            or len({e.detail.startswith("FINISH_ABORT") for e in ended}) > 1
        ):
            earliest = min(ended, key=lambda e: e.step)
            each = ", ".join(f"rank {r}: {_end(e)}" for r, e in streamed.items())
            add(
                "unanimous",
                earliest.step,
                earliest.time,
                rid,
                f"ranks end it differently ({each})",
            )
        if entry is None:
            continue
        deadline = entry.time + config.lag_of(0) + TIMEOUT
        first = streamed[0]
        if first is not None and first.detail.startswith("FINISH_ABORT"):
            early = lag_verdict(first.time, deadline, config.step)
            if early is not None and first.time < deadline - EPS:
                add("never-early", first.step, first.time, rid, early)
            completes = (
                entry.time + spec.transfer_s if spec.transfer_s is not None else float("inf")
            )
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
                    f"({deadline:g} s; the lag allowed is {LAG_STEPS} steps)",
                )
                break
    return sorted(found.values(), key=lambda v: (v.step, v.prop))


def run_schedule(config: WorldConfig, target: Target) -> list[Violation]:
    trace = run_world(config, target)
    if trace.failure is not None and trace.failure.gap is not None:
        raise SimulationGap(trace.failure.gap)
    return violations(trace)


def shrink(config: WorldConfig, target: Target, prop: str) -> WorldConfig:
    """A smaller schedule that still breaks ``prop``: requests and faults taken away one at a
    time, each kept away when ``prop`` still fails."""

    def fails(candidate: WorldConfig) -> bool:
        return any(v.prop == prop for v in run_schedule(candidate, target))

    changed = True
    while changed:
        changed = False
        simpler = [
            dataclasses.replace(config, requests=config.requests[:i] + config.requests[i + 1 :])
            for i in range(len(config.requests))
            if len(config.requests) > 1
        ]
        if config.pool_full:
            simpler.append(dataclasses.replace(config, pool_full=()))
        if config.optimistic_attempts:
            simpler.append(dataclasses.replace(config, optimistic_attempts=0))
        if any(config.clock_offsets):
            simpler.append(dataclasses.replace(config, clock_offsets=()))
        if config.lag_spread:
            simpler.append(dataclasses.replace(config, lag_spread=0.0))
        for candidate in simpler:
            if fails(candidate):
                config, changed = candidate, True
                break
    return config


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
    if config.optimistic_attempts:
        faults.append("optimistic requeues")
    for start, end in config.pool_full:
        faults.append(f"memory pressure {start:g}-{end:g} s")
    return "; ".join(parts + faults)


@dataclass(frozen=True)
class SeedResult:
    seed: int
    schedule: str
    violations: tuple[Violation, ...]
    shrunk: str | None = None  # the shrunk schedule of the first violation


def run_seeds(target: Target, seeds: list[int], ranks: int) -> list[SeedResult]:
    results: list[SeedResult] = []
    for seed in seeds:
        config = schedule(seed, target, ranks)
        found = tuple(run_schedule(config, target))
        shrunk = describe(shrink(config, target, found[0].prop)) if found else None
        results.append(SeedResult(seed, describe(config), found, shrunk))
    return results
