"""The scenarios: each a world to simulate and the property its trace must show.

Every expectation is the property the inflight-deadline fix is meant to give (the *patched*
behaviour). On an unpatched tree the wedge scenarios therefore fail, and their row says what the
bug looks like ("still waiting after 600 s"): the simulation shows the bug, not only the fix.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

from ... import sglang_names as names
from ...errors import SimulationGap
from ..loader import Target
from ..lockstep import LAG_STEPS, Divergence, lag_verdict
from ..spec import Outcome, RequestSpec
from ..standins import MissingStandIn
from .world import EPS, Trace, WorldConfig

TIMEOUT_ENV = names.INFLIGHT_TIMEOUT_ENV
BOOTSTRAP_ENV = names.BOOTSTRAP_TIMEOUT_ENV
DEFAULT_TIMEOUT = 300.0
WEDGE_HORIZON = 2 * DEFAULT_TIMEOUT
BOOTSTRAP_TIMEOUT = 30.0
RETRY_HOOK_ENV = "SGLANG_TEST_FORCE_OPTIMISTIC_PREFILL_RETRY_PROB"
WEDGED = RequestSpec("wedged", arrival=0.0, prefill_s=1.0, transfer_s=None)


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str
    world: Callable[[int], WorldConfig]  # ranks -> the world
    judge: Callable[[Trace], Outcome]
    applies: Callable[[Target], str | None] = lambda target: None  # why not, or None
    # the world as it fits the target (a backend only some releases can run), or None
    fit: Callable[[Target, WorldConfig], WorldConfig] | None = None


# -- judging -----------------------------------------------------------------------------------


def _crash(trace: Trace) -> Outcome | None:
    failure = trace.failure
    if failure is None:
        return None
    error = failure.error
    if failure.gap is not None:
        raise SimulationGap(failure.gap)
    if isinstance(error, MissingStandIn):  # a gap the world did not place
        raise SimulationGap(f"{error} (at {failure.where})")
    if isinstance(error, Divergence):
        return Outcome("fail", f"ranks diverged at {failure.time:g} s: {error}", failure.time)
    return Outcome(
        "fail",
        f"rank {failure.rank} raised {type(error).__name__}: {error} at {failure.time:g} s "
        f"({failure.where})",
        failure.time,
    )


@dataclass(frozen=True)
class _Fate:
    """What happened to one request on one rank."""

    step: int | None  # when it was streamed back to the client
    time: float | None
    aborted: bool  # with an error
    kv_released: bool
    held: bool  # still in a queue at the end


def _fate(trace: Trace, rid: str, rank: int) -> _Fate:
    streamed = [e for e in trace.events_of("streamed", rid) if e.rank == rank]
    first = streamed[0] if streamed else None
    released = any(
        e.rank == rank and (first is None or e.step <= first.step)
        for e in trace.events_of("kv_released", rid)
    )
    held = bool(trace.snapshots) and trace.snapshots[-1].holds(rid, rank)
    return _Fate(
        first.step if first else None,
        first.time if first else None,
        bool(first and first.detail.startswith("FINISH_ABORT")),
        released,
        held,
    )


def _where(trace: Trace, rid: str) -> str:
    last = trace.snapshots[-1] if trace.snapshots else None
    if last is None:
        return "nowhere"
    for name, queues in (
        ("inflight", last.inflight),
        ("bootstrap", last.bootstrap),
        ("prefill", last.prefilling),
    ):
        ranks = [r for r, q in enumerate(queues) if rid in q]
        if ranks:
            on = "all ranks" if len(ranks) == len(queues) else f"ranks {ranks}"
            return f"in the {name} queue on {on}"
    return "in no queue"


def _failed_at(trace: Trace, rid: str, deadline: float, what: str, kv: bool = True) -> Outcome:
    """``rid`` must be failed after ``deadline``, within the documented lag (``LAG_STEPS``
    steps), in the same step on every rank, with an error to the client, its KV released
    (``kv``), and no queue holding it."""
    step = trace.config.step
    fates = [_fate(trace, rid, r) for r in range(trace.config.ranks)]
    if all(f.step is None for f in fates):
        return Outcome(
            "fail",
            f"still waiting after {trace.end:g} simulated seconds ({_where(trace, rid)}): "
            f"no {what} fired",
            trace.end,
        )
    steps = {f.step for f in fates}
    if len(steps) > 1:
        when = ", ".join(
            f"rank {r}: {'never' if f.time is None else f'{f.time:g} s'}"
            for r, f in enumerate(fates)
        )
        return Outcome("fail", f"ranks ended it in different steps ({when})", trace.end)
    at = fates[0].time
    assert at is not None
    if not all(f.aborted for f in fates):
        return Outcome("fail", f"finished at {at:g} s without an error to the client", at)
    late = lag_verdict(at, deadline, step)
    if late is not None:
        return Outcome("fail", late, at)
    if kv and not all(f.kv_released for f in fates):
        return Outcome("fail", f"failed at {at:g} s but its KV was never released", at)
    if any(f.held for f in fates):
        return Outcome("fail", f"failed at {at:g} s but still {_where(trace, rid)}", at)
    ranks = trace.config.ranks
    on = "on every rank in the same step" if ranks > 1 else "on its one rank"
    released = ", KV released" if kv else ""
    return Outcome(
        "pass",
        f"failed at {at:g} s (deadline {deadline:g} s) {on}: client error{released}, queues empty",
        at,
    )


def _deadline(timeout: float, rid: str = WEDGED.rid) -> Callable[[Trace], Outcome]:
    def judge(trace: Trace) -> Outcome:
        crash = _crash(trace)
        if crash is not None:
            return crash
        entry = trace.entered_inflight(rid)
        if entry is None:
            return Outcome("fail", f"never reached the inflight queue ({_where(trace, rid)})", 0)
        start = entry.time + trace.config.lag_of(0)
        outcome = _failed_at(trace, rid, start + timeout, "inflight deadline")
        if outcome.verdict == "fail" and timeout != DEFAULT_TIMEOUT:
            # a deadline that keeps the default is a deadline: this code has no such setting
            default = _failed_at(trace, rid, start + DEFAULT_TIMEOUT, "inflight deadline")
            if default.verdict == "pass":
                return Outcome(
                    "n/a",
                    f"this code does not read {TIMEOUT_ENV}: {default.observed} (the default "
                    "deadline)",
                    default.seconds,
                )
        return outcome

    return judge


def _never_failed(trace: Trace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    rids = [s.rid for s in trace.config.requests]
    ranks = range(trace.config.ranks)
    fates = {(rid, r): _fate(trace, rid, r) for rid in rids for r in ranks}
    failed = sorted({rid for (rid, _), f in fates.items() if f.aborted})
    if failed:
        at = min(f.time or 0 for (rid, _), f in fates.items() if rid in failed)
        return Outcome("fail", f"{len(failed)} failed, first at {at:g} s: {failed[:3]}", at)
    unfinished = sorted({rid for (rid, _), f in fates.items() if f.step is None or f.held})
    if unfinished:
        return Outcome(
            "fail",
            f"{len(unfinished)} not complete after {trace.end:g} s "
            f"({unfinished[0]} {_where(trace, unfinished[0])})",
            trace.end,
        )
    done = max(f.time or 0 for f in fates.values())
    if len(rids) == 1:
        return Outcome("pass", f"completed at {done:g} s, never failed", done)
    return Outcome("pass", f"{len(rids)}/{len(rids)} completed by {done:g} s, 0 failed", done)


def _deadline_off(trace: Trace) -> Outcome:
    """``0`` for the timeout: where the code has an off switch the request is never failed.
    Code without one reads 0 as a 0 s deadline (failed within the lag of its entry) or as
    "the default" (failed at the default deadline): the expectation is n/a there. Failed at
    any other time, it is neither."""
    crash = _crash(trace)
    if crash is not None:
        return crash
    fate = _fate(trace, WEDGED.rid, 0)
    if fate.step is None or fate.time is None:
        return Outcome(
            "pass",
            f"still waiting after {trace.end:g} s ({_where(trace, WEDGED.rid)}): the deadline "
            "is off, as configured",
            trace.end,
        )
    entry = trace.entered_inflight(WEDGED.rid)
    start = (entry.time if entry else 0.0) + trace.config.lag_of(0)
    for deadline, means in ((start, "a 0 s deadline"), (start + DEFAULT_TIMEOUT, "the default")):
        if lag_verdict(fate.time, deadline, trace.config.step) is None:
            return Outcome(
                "n/a",
                f"this code has no off switch: it reads 0 as {means} (failed at {fate.time:g} s)",
                fate.time,
            )
    return Outcome(
        "fail",
        f"failed at {fate.time:g} s with the deadline set to 0: neither off, nor a 0 s "
        f"deadline, nor the default ({DEFAULT_TIMEOUT:g} s)",
        fate.time,
    )


def _skewed(trace: Trace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    for snapshot in trace.snapshots:
        if len(set(snapshot.inflight)) > 1:
            queues = "; ".join(f"rank {r}: {list(q)}" for r, q in enumerate(snapshot.inflight))
            return Outcome(
                "fail", f"inflight queues differ at {snapshot.time:g} s ({queues})", snapshot.time
            )
    entry = trace.entered_inflight(WEDGED.rid)
    if entry is None:
        return Outcome("fail", "the wedged request never reached the inflight queue", 0)
    first = entry.time + trace.config.lag_of(0) + DEFAULT_TIMEOUT  # rank 0 stamps first
    outcome = _failed_at(trace, WEDGED.rid, first, "inflight deadline")
    if outcome.verdict == "pass":
        return Outcome(
            "pass",
            outcome.observed.replace("queues empty", "inflight queues identical at every step"),
            outcome.seconds,
        )
    return outcome


def _bootstrap_wedge(trace: Trace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    rid = "bootstrap-wedged"
    first = trace.snapshots[0] if trace.snapshots else None
    if first is None or rid not in first.bootstrap[0]:
        return Outcome(
            "n/a",
            "this release's NixlKVSender never reports Bootstrapping (it left the bootstrap "
            f"queue at once; it ends {_where(trace, rid)})",
            trace.end,
        )
    deadline = trace.config.lag_of(0) + BOOTSTRAP_TIMEOUT  # from the sender's creation
    return _failed_at(trace, rid, deadline, "bootstrap timeout", kv=False)


def _has_nixl(target: Target) -> str | None:
    return None if target.nixl_sender else f"the target has no {names.NIXL_SENDER}"


def _without_unrunnable_nixl(target: Target, config: WorldConfig) -> WorldConfig:
    """Leave out requests on NIXL's sender where it cannot run on the scripted transport."""
    if target.nixl_sender is not None and target.nixl_polls_manager:
        return config
    kept = tuple(r for r in config.requests if r.backend != "nixl")
    return dataclasses.replace(config, requests=kept)


def _has_mooncake(target: Target) -> str | None:
    return None if target.mooncake_sender else "the target has no MooncakeKVSender"


REQUEUE = "optimistic_release_and_requeue"


def _has_requeue(target: Target) -> str | None:
    if REQUEUE in target.mixin_methods:
        return None
    return f"no optimistic prefill in this release (no {REQUEUE}, 0.5.13+)"


def _parks(target: Target) -> str | None:
    if "pending_bootstrap" in target.inflight_attrs:
        return None
    return (
        f"the inflight queue holds no parked requests in this release ({names.INFLIGHT_FUNCTION} "
        "never reads pending_bootstrap; 0.5.16+)"
    )


def _ran(trace: Trace, rid: str, method: str) -> int:
    """How many times the target's own ``method`` ran for ``rid`` on rank 0."""
    return sum(1 for e in trace.events_of("called", rid) if e.rank == 0 and e.detail == method)


def _optimistic_requeue(trace: Trace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    times = _ran(trace, "optimistic", REQUEUE)
    if not times:
        raise SimulationGap(
            f"the scenario did not reach the release's own {REQUEUE}: its path cannot be run"
        )
    outcome = _never_failed(trace)
    where = f"left through the release's {REQUEUE} {times} time(s) and came back; "
    entered = _last_entry(trace, "optimistic", outcome.seconds)
    if outcome.verdict == "fail" and entered is not None:
        where += f"it entered the inflight queue again at {entered:g} s; "
    return Outcome(outcome.verdict, where + outcome.observed, outcome.seconds)


def _last_entry(trace: Trace, rid: str, until: float) -> float | None:
    """When ``rid`` last entered rank 0's inflight queue, at or before ``until``."""
    times = [
        e.time
        for e in trace.events_of("entered_inflight", rid)
        if e.rank == 0 and e.time <= until + EPS
    ]
    return times[-1] if times else None


def _parked(trace: Trace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    spec = trace.config.requests[0]
    parked = [s for s in trace.snapshots if spec.rid in s.inflight[0] and s.time < spec.bootstrap_s]
    if not parked:
        raise SimulationGap(
            f"{spec.rid} was never parked in the inflight queue while bootstrapping: the "
            "scenario cannot run the parked path"
        )
    outcome = _never_failed(trace)
    where = (
        f"parked in the inflight queue from {parked[0].time:g} s to {parked[-1].time:g} s "
        f"while bootstrapping; "
    )
    completes = "mark_prefill_complete() ran; " if trace.events_of("prefill_complete") else ""
    return Outcome(outcome.verdict, where + completes + outcome.observed, outcome.seconds)


def _pp_consensus(target: Target) -> str | None:
    if names.PP_CONSENSUS_PARAM in target.inflight_args:
        return None
    return (
        f"no PP consensus in this release ({names.INFLIGHT_FUNCTION} takes no "
        f"{names.PP_CONSENSUS_PARAM})"
    )


def _consistent(trace: Trace) -> Outcome:
    """One outcome on every rank: the same step, the same finish (success or a client error),
    KV released, no queue holding it; never before its deadline."""
    crash = _crash(trace)
    if crash is not None:
        return crash
    rid = trace.config.requests[0].rid
    fates = [_fate(trace, rid, r) for r in range(trace.config.ranks)]
    if any(f.step is None for f in fates):
        return Outcome(
            "fail",
            f"not ended on every rank after {trace.end:g} s ({_where(trace, rid)})",
            trace.end,
        )
    steps = {f.step for f in fates}
    kinds = {f.aborted for f in fates}
    at = fates[0].time or 0.0
    unit = "stage" if trace.config.pp_stages > 1 else "rank"
    if len(steps) > 1 or len(kinds) > 1:
        each = ", ".join(
            f"{unit} {r}: {'error' if f.aborted else 'success'} at {f.time:g} s"
            for r, f in enumerate(fates)
        )
        return Outcome("fail", f"{unit}s disagree ({each})", at)
    if not all(f.kv_released for f in fates) or any(f.held for f in fates):
        return Outcome("fail", f"ended at {at:g} s but its KV or a queue still holds it", at)
    entry = trace.entered_inflight(rid)
    deadline = (entry.time if entry else 0.0) + trace.config.lag_of(0) + DEFAULT_TIMEOUT
    if fates[0].aborted and at < deadline - EPS:
        return Outcome("fail", f"failed at {at:g} s, before its deadline ({deadline:g} s)", at)
    what = "a client error" if fates[0].aborted else "success"
    return Outcome(
        "pass", f"{what} on every {unit} in the same step at {at:g} s (deadline {deadline:g} s)", at
    )


def _stages_agree(trace: Trace) -> Outcome:
    """PP: every stage ends every request, all the same way (success on every stage, or a
    client error on every stage), KV released, no queue holding it; a request the stages
    agreed had transferred before the first stage's deadline succeeds, a failure never comes
    before that deadline, a wedged request fails. Each stage ends a request when the
    consensus reaches it, one round after the stage before."""
    crash = _crash(trace)
    if crash is not None:
        return crash
    stages = range(trace.config.ranks)
    parts: list[str] = []
    wrong: list[str] = []
    last = 0.0
    for spec in trace.config.requests:
        rid = spec.rid
        fates = [_fate(trace, rid, k) for k in stages]
        each = ", ".join(
            f"stage {k}: "
            + (
                "never"
                if f.time is None
                else f"{'error' if f.aborted else 'success'} at {f.time:g} s"
            )
            for k, f in zip(stages, fates, strict=True)
        )
        parts.append(f"{rid} ({each})")
        last = max([last, *(f.time or 0.0 for f in fates)])
        if any(f.step is None for f in fates):
            wrong.append(f"{rid} not ended on every stage ({_where(trace, rid)})")
        elif len({f.aborted for f in fates}) > 1:
            wrong.append(f"stages disagree on {rid}")
        elif not all(f.kv_released for f in fates) or any(f.held for f in fates):
            wrong.append(f"{rid}: its KV or a queue still holds it")
        elif spec.transfer_s is None and not fates[0].aborted:
            wrong.append(f"{rid} succeeded without a transfer")
        elif fates[0].aborted:
            entry = trace.entered_inflight(rid)
            deadline = (entry.time if entry else 0.0) + trace.config.lag_of(0) + DEFAULT_TIMEOUT
            at = min(f.time or 0.0 for f in fates)
            agreed = [e.time for e in trace.events_of("pp_agreed", rid) if e.rank == 0]
            if at < deadline - EPS:
                wrong.append(f"{rid} failed at {at:g} s, before its deadline ({deadline:g} s)")
            elif agreed and agreed[0] < deadline - EPS:
                wrong.append(
                    f"{rid} failed although the stages agreed at {agreed[0]:g} s, before its "
                    f"deadline ({deadline:g} s), that it had transferred"
                )
    observed = "; ".join(parts)
    if wrong:
        return Outcome("fail", f"{'; '.join(wrong)}: {observed}", last)
    return Outcome("pass", f"every stage ends each request alike: {observed}", last)


def _kv_kept_under_transfer(trace: Trace) -> Outcome:
    """The request is aborted (by the inflight deadline) while the transfer its sender posted
    runs: it ends on every rank with a client error, and no rank releases its KV pages (which
    the pool then reuses) before that transfer ended."""
    crash = _crash(trace)
    if crash is not None:
        return crash
    if not trace.config.requests:  # left out by _without_unrunnable_nixl
        return Outcome(
            "n/a", f"this release's {names.NIXL_SENDER} cannot run on the scripted transport", 0
        )
    spec = trace.config.requests[0]
    posted = [e for e in trace.events_of("kv_posted", spec.rid) if e.rank == 0]
    if not posted:
        return Outcome(
            "n/a",
            f"this release's {names.NIXL_SENDER} posts no transfer of its own (its manager's "
            "threads do, 0.5.12+), or has no xfer_handles",
            trace.end,
        )
    assert spec.transfer_s is not None
    ended = posted[0].time + spec.transfer_s
    aborted = [e.time for e in trace.events_of("sender_abort", spec.rid)]
    released = [e for e in trace.events_of("kv_released", spec.rid)]
    early = [e for e in released if e.time < ended - EPS]
    if early:
        return Outcome(
            "fail",
            f"KV released at {early[0].time:g} s on rank {early[0].rank}, while the transfer "
            f"posted at {posted[0].time:g} s still ran (until {ended:g} s)",
            early[0].time,
        )
    fates = [_fate(trace, spec.rid, r) for r in range(trace.config.ranks)]
    if any(f.step is None or f.held for f in fates) or len(released) < trace.config.ranks:
        return Outcome(
            "fail",
            f"not ended with its KV released on every rank after {trace.end:g} s "
            f"({_where(trace, spec.rid)})",
            trace.end,
        )
    at = max(f.time or 0.0 for f in fates)
    how = "a client error" if all(f.aborted for f in fates) else "success"
    when = f"aborted at {aborted[0]:g} s, " if aborted else ""
    return Outcome(
        "pass",
        f"{when}the posted transfer ran until {ended:g} s; {how} on every rank at {at:g} s, "
        "KV released only then",
        at,
    )


# -- worlds ------------------------------------------------------------------------------------


def _healthy(count: int, seed: int, start: float = 0.0) -> tuple[RequestSpec, ...]:
    rng = random.Random(seed)
    return tuple(
        RequestSpec(
            f"req-{i:03d}",
            arrival=start + round(i * 0.1, 2),
            prefill_s=round(rng.uniform(0.2, 2.0), 2),
            transfer_s=round(rng.uniform(0.1, 5.0), 2),
        )
        for i in range(count)
    )


def _spread(ranks: int, width: float) -> tuple[float, ...]:
    return tuple(width * r / (ranks - 1) for r in range(ranks)) if ranks > 1 else (0.0,)


POSTED_TIMEOUT = 60.0
POSTED_TRANSFER_S = 100.0
STALL = (2.0, 2.0 + DEFAULT_TIMEOUT + 100.0)
OPTIMISTIC_TIMEOUT = 60.0
PARKED_BOOTSTRAP_S = 100.0
MEMORY_WAIT_S = 90.0

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "wedge",
        "decode gone (WaitingForInput for ever): failed after the 300 s deadline (within "
        f"{LAG_STEPS} steps) on every rank: client error, KV released, queue empty",
        lambda ranks: WorldConfig((WEDGED,), ranks, horizon=WEDGE_HORIZON),
        _deadline(DEFAULT_TIMEOUT),
    ),
    Scenario(
        "long-prefill",
        "164 s prefill, then a 2 s transfer: completes, never failed",
        lambda ranks: WorldConfig(
            (RequestSpec("long", prefill_s=164.0, transfer_s=2.0),), ranks, horizon=200.0
        ),
        _never_failed,
    ),
    Scenario(
        "long-prefill-60s-deadline",
        f"{TIMEOUT_ENV}=60, 164 s prefill, 2 s transfer: completes, never failed (the clock "
        "starts at the inflight queue)",
        lambda ranks: WorldConfig(
            (RequestSpec("long", prefill_s=164.0, transfer_s=2.0),),
            ranks,
            horizon=200.0,
            env={TIMEOUT_ENV: "60"},
        ),
        _never_failed,
    ),
    Scenario(
        "healthy-traffic",
        "100 requests, 0.1-5 s transfers: all complete, none failed",
        lambda ranks: WorldConfig(_healthy(100, seed=5), ranks, horizon=60.0),
        _never_failed,
    ),
    Scenario(
        "skewed-ranks",
        "clocks and stamps up to 1 s apart across ranks, a wedged request among healthy ones: "
        "every rank fails it in the step the first rank's deadline passes; inflight queues "
        "identical on all ranks at every step",
        lambda ranks: WorldConfig(
            (WEDGED, *_healthy(6, seed=7, start=0.5)),
            ranks,
            horizon=WEDGE_HORIZON,
            clock_offsets=tuple(-x for x in _spread(ranks, 1.0)),
            lag_spread=1.0,
        ),
        _skewed,
    ),
    Scenario(
        "bootstrap-wedge",
        f"NIXL sender stuck in Bootstrapping (decode never sent its info), {BOOTSTRAP_ENV}=30: "
        f"the sender's own bootstrap timeout fails it after 30 s (within {LAG_STEPS} steps): "
        "client error, "
        "no queue holds it",
        lambda ranks: WorldConfig(
            (RequestSpec("bootstrap-wedged", prefill_s=1.0, nixl=True),),
            ranks,
            horizon=4 * BOOTSTRAP_TIMEOUT,
            env={BOOTSTRAP_ENV: str(int(BOOTSTRAP_TIMEOUT))},
        ),
        _bootstrap_wedge,
        _has_nixl,
    ),
    Scenario(
        "deadline-120s",
        f"{TIMEOUT_ENV}=120, decode gone: failed after 120 s (within {LAG_STEPS} steps), not 300 s",
        lambda ranks: WorldConfig(
            (WEDGED,), ranks, horizon=WEDGE_HORIZON, env={TIMEOUT_ENV: "120"}
        ),
        _deadline(120.0),
    ),
    Scenario(
        "success-at-deadline",
        "the transfer completes in the very step the deadline passes (rank 0 already overdue, "
        "rank 1 not yet): one outcome on every rank, in the same step (success everywhere or "
        "a client error everywhere), KV released, no queue holds it",
        lambda ranks: WorldConfig(
            (RequestSpec("at-deadline", prefill_s=1.0, transfer_s=DEFAULT_TIMEOUT + 0.25),),
            ranks,
            horizon=DEFAULT_TIMEOUT + 20,
            lag_spread=0.2,
        ),
        _consistent,
    ),
    Scenario(
        "decode-memory-wait",
        f"decode has no free memory for {MEMORY_WAIT_S:g} s, so the release's own senders "
        "(Mooncake's, and NIXL's where it reads its status from its KV manager) stay "
        f"Bootstrapping that long, then the transfer completes ({BOOTSTRAP_ENV} left at the "
        "release's default): never failed. A bootstrap timeout shorter than upstream's "
        "(pdguard's 30 s on 0.4.7 - 0.4.8) fails it",
        lambda ranks: WorldConfig(
            (
                RequestSpec("memory-wait", bootstrap_s=MEMORY_WAIT_S, transfer_s=2.0),
                RequestSpec(
                    "memory-wait-nixl", bootstrap_s=MEMORY_WAIT_S, transfer_s=2.0, backend="nixl"
                ),
            ),
            ranks,
            horizon=MEMORY_WAIT_S + 30,
        ),
        _never_failed,
        _has_mooncake,
        _without_unrunnable_nixl,
    ),
    Scenario(
        "optimistic-requeue",
        f"{TIMEOUT_ENV}={OPTIMISTIC_TIMEOUT:g}, optimistic prefill: the request leaves through "
        f"the release's own {REQUEUE} (the pool is full and another request waits, or the "
        "release's retry hook) and comes back after 80 s: each entry starts a fresh deadline, "
        "so it completes, never failed",
        lambda ranks: WorldConfig(
            (
                RequestSpec("optimistic", bootstrap_s=5.0, prefill_s=1.0, transfer_s=5.0),
                RequestSpec("waiting", arrival=1.5, prefill_s=1.0, transfer_s=1.0),
            ),
            ranks,
            horizon=120.0,
            env={TIMEOUT_ENV: f"{OPTIMISTIC_TIMEOUT:g}", RETRY_HOOK_ENV: "1"},
            optimistic_attempts=2,
            pool_full=((2.0, 80.0),),
        ),
        _optimistic_requeue,
        _has_requeue,
    ),
    Scenario(
        "parked-bootstrap",
        f"{TIMEOUT_ENV}={OPTIMISTIC_TIMEOUT:g}, optimistic prefill: the request is parked in "
        f"the inflight queue while it bootstraps for {PARKED_BOOTSTRAP_S:g} s (longer than the "
        "inflight deadline, within the bootstrap timeout; decode allocates after prefill, "
        "mark_prefill_complete, on 0.5.22+): parked time is not counted, so it completes, "
        "never failed by the inflight deadline",
        lambda ranks: WorldConfig(
            (RequestSpec("parked", bootstrap_s=PARKED_BOOTSTRAP_S, transfer_s=2.0),),
            ranks,
            horizon=PARKED_BOOTSTRAP_S + 30,
            env={TIMEOUT_ENV: f"{OPTIMISTIC_TIMEOUT:g}"},
            optimistic_attempts=1,
            allocation_policy="prefill_complete",
        ),
        _parked,
        _parks,
    ),
    Scenario(
        "pp-stages",
        "two PP stages (the second stamps 0.1 s later), the consensus travelling the ring one "
        "stage per round: 'pp-agreed' transfers in the round before the first stage's "
        "deadline, so the second stage's deadline passes while the consensus is on its way "
        "to it; 'pp-at-deadline' transfers in the round both deadlines pass; 'pp-wedged' never "
        "transfers. Every stage ends each request alike (success on every stage, or a client "
        "error on every stage), KV released, no queue holds it: 'pp-agreed' succeeds, "
        "'pp-wedged' fails",
        lambda ranks: WorldConfig(
            (
                RequestSpec("pp-agreed", prefill_s=1.0, transfer_s=DEFAULT_TIMEOUT),
                RequestSpec("pp-at-deadline", prefill_s=1.0, transfer_s=DEFAULT_TIMEOUT + 0.25),
                RequestSpec("pp-wedged", prefill_s=1.0, transfer_s=None),
            ),
            2,
            horizon=DEFAULT_TIMEOUT + 20,
            lag_spread=0.1,
            pp_stages=2,
        ),
        _stages_agree,
        _pp_consensus,
    ),
    Scenario(
        "stalled-queue",
        f"the inflight queue goes unpolled from {STALL[0]:g} s to {STALL[1]:g} s (longer than "
        "the 300 s deadline: a scheduler stall, an in-place pause_generation) while its 20 "
        "transfers complete: none is failed",
        lambda ranks: WorldConfig(
            _healthy(20, seed=11), ranks, horizon=STALL[1] + 20, stalls=(STALL,)
        ),
        _never_failed,
    ),
    Scenario(
        "abort-during-transfer",
        f"{TIMEOUT_ENV}={POSTED_TIMEOUT:g}, a NIXL sender that posts its own transfer (0.5.3 "
        f"- 0.5.11) whose transfer runs {POSTED_TRANSFER_S:g} s: the deadline aborts it "
        "while the transfer runs; it ends on every rank, and no rank releases its KV pages "
        "before the posted transfer ended",
        lambda ranks: WorldConfig(
            (
                RequestSpec(
                    "posted",
                    transfer_s=POSTED_TRANSFER_S,
                    backend="nixl",
                    posts_transfer=True,
                ),
            ),
            ranks,
            horizon=POSTED_TRANSFER_S + 30,
            env={TIMEOUT_ENV: f"{POSTED_TIMEOUT:g}"},
        ),
        _kv_kept_under_transfer,
        _has_nixl,
        _without_unrunnable_nixl,
    ),
    Scenario(
        "deadline-off",
        f"{TIMEOUT_ENV}=0, decode gone: never failed where the code has an off switch; n/a "
        "where it has none (0 read as a 0 s deadline or as the default)",
        lambda ranks: WorldConfig((WEDGED,), ranks, horizon=WEDGE_HORIZON, env={TIMEOUT_ENV: "0"}),
        _deadline_off,
    ),
)

NAMES = tuple(s.name for s in SCENARIOS)
