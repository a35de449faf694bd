"""The decode scenarios: the release's own decode queues and KV receivers (``decode.world``)
against a prefill that dies, fails a request, never registers it, or a decode that has no
memory. Each expectation is what the decode fixes (receiver-waiting-timeout,
decode-queue-bound) should give; on an unpatched release the wedge rows fail and say what the
wedge looks like ("still waiting after 600 s, in the transfer queue ...").

Every scenario sends one request per backend the release has a receiver for (Mooncake's,
NIXL's), each on its own receiver class; the row fails if any backend's request does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...errors import SimulationGap
from ...tree import SourceTree
from .. import prefill, standins
from ..lockstep import LAG_STEPS, lag_verdict
from ..prefill import world as prefill_world
from ..prefill.scenarios import _deadline
from ..spec import DecodeSpec, Outcome, RequestSpec
from .loader import DecodeTarget
from .world import METADATA_SLOTS, SCRIPTED, DecodeConfig, DecodeTrace

WAITING_TIMEOUT = 300.0
HORIZON = 2 * WAITING_TIMEOUT
BACKPRESSURE_S = 600.0  # ten minutes of full decode memory
RETRACT_AT = 1.0


@dataclass(frozen=True)
class DecodeScenario:
    name: str
    expected: str
    world: Callable[[DecodeTarget, int], DecodeConfig]  # (target, ranks) -> the world
    judge: Callable[[DecodeTrace], Outcome]
    applies: Callable[[DecodeTarget], str | None] = lambda target: None
    # the prefill half a scenario runs first in the prefill world (the release's own inflight
    # queue): (tree, ranks) -> its outcome
    prefill: Callable[[SourceTree, int], Outcome] | None = None


# -- judging ---------------------------------------------------------------------------------


def _crash(trace: DecodeTrace) -> Outcome | None:
    failure = trace.failure
    if failure is None:
        return None
    if failure.gap is not None:
        raise SimulationGap(failure.gap)
    if isinstance(failure.error, standins.MissingStandIn):
        raise SimulationGap(f"{failure.error} (at {failure.where})")
    return Outcome(
        "fail",
        f"rank {failure.rank} raised {type(failure.error).__name__}: {failure.error} at "
        f"{failure.time:g} s ({failure.where})",
        failure.time,
    )


def _where(trace: DecodeTrace, rid: str) -> str:
    last = trace.snapshots[-1] if trace.snapshots else None
    if last is None:
        return "nowhere"
    places = {last.where(rid, r) for r in range(trace.config.ranks)} - {None}
    return f"in the {'/'.join(sorted(p for p in places if p))} queue" if places else "in no queue"


def _released(trace: DecodeTrace, rid: str, timeout: float = WAITING_TIMEOUT) -> Outcome:
    """``rid`` (its prefill gone after the indices were sent) must be failed after ``timeout``
    seconds from the indices, within the documented lag, on every rank in the same step, with a
    client error, its KV released, its request-pool and metadata slots free."""
    ranks = range(trace.config.ranks)
    sent = [e for e in trace.events_of("indices_sent", rid) if e.rank == 0]
    if not sent:
        return Outcome("fail", f"its indices were never sent ({_where(trace, rid)})", trace.end)
    deadline = sent[0].time + timeout  # the receiver's clock starts as the indices leave
    streamed = {
        r: next((e for e in trace.events_of("streamed", rid) if e.rank == r), None) for r in ranks
    }
    if all(e is None for e in streamed.values()):
        return Outcome(
            "fail",
            f"still waiting after {trace.end:g} simulated seconds ({_where(trace, rid)} on "
            f"every rank): no timeout released it; its KV, request-pool and metadata slots "
            "are held",
            trace.end,
        )
    steps = {e.step if e else None for e in streamed.values()}
    if len(steps) > 1:
        return Outcome("fail", "ranks released it in different steps", trace.end)
    first = streamed[0]
    assert first is not None
    at = first.time
    if not first.detail.startswith("FINISH_ABORT"):
        return Outcome("fail", f"finished at {at:g} s without an error to the client", at)
    late = lag_verdict(at, deadline, trace.config.step)
    if late is not None:
        return Outcome("fail", late, at)
    freed = all(any(e.rank == r for e in trace.events_of("kv_released", rid)) for r in ranks)
    if not freed:
        return Outcome("fail", f"failed at {at:g} s but its KV was never released", at)
    if _where(trace, rid) != "in no queue":
        return Outcome("fail", f"failed at {at:g} s but still {_where(trace, rid)}", at)
    return Outcome(
        "pass",
        f"failed at {at:g} s ({timeout:g} s after its indices were sent) on every rank in the "
        "same step: client error, KV released",
        at,
    )


def _slots(trace: DecodeTrace, held: int = 0) -> str | None:
    """Every request-pool and metadata slot free at the end, but ``held``; else what is not."""
    last = trace.snapshots[-1]
    if any(n > held for n in last.req_slots) or any(
        METADATA_SLOTS - free > held for free in last.metadata_free
    ):
        return (
            f"request-pool slots in use {list(last.req_slots)}, metadata slots in use "
            f"{[METADATA_SLOTS - f for f in last.metadata_free]} at {trace.end:g} s"
        )
    return None


def _each(rids: Callable[[DecodeTrace], list[str]], held: int = 0) -> Callable[..., Outcome]:
    def judge(trace: DecodeTrace) -> Outcome:
        crash = _crash(trace)
        if crash is not None:
            return crash
        outcomes = [(rid, _released(trace, rid)) for rid in rids(trace)]
        verdict = "fail" if any(o.verdict == "fail" for _, o in outcomes) else "pass"
        observed = "; ".join(f"{rid}: {o.observed}" for rid, o in outcomes)
        if verdict == "pass":
            leak = _slots(trace, held)
            if leak is not None:
                return Outcome("fail", f"{observed}; but {leak}", trace.end)
            observed += "; request-pool and metadata slots free"
        return Outcome(verdict, observed, max((o.seconds for _, o in outcomes), default=trace.end))

    return judge


def _retracted_waits(judge: Callable[[DecodeTrace], Outcome]) -> Callable[..., Outcome]:
    """``judge``, once the retracted request is seen waiting in the retracted queue (the
    retraction gate's path); a run that never put it there cannot show the gate: exit 2."""

    def judged(trace: DecodeTrace) -> Outcome:
        crash = _crash(trace)
        if crash is not None:
            return crash
        waiting = [s for s in trace.snapshots if "retracted" in s.retracted[0]]
        if not waiting:
            raise SimulationGap(
                "the retracted request never waited in the prealloc queue's retracted_queue: "
                "the scenario cannot run the retraction gate's path"
            )
        outcome = judge(trace)
        return Outcome(
            outcome.verdict,
            f"retracted request waiting from {waiting[0].time:g} s; {outcome.observed}",
            outcome.seconds,
        )

    return judged


def _gone(trace: DecodeTrace) -> list[str]:
    return [s.rid for s in trace.config.requests if s.transfer_s is None and not s.retracted]


def _never_failed(trace: DecodeTrace) -> Outcome:
    crash = _crash(trace)
    if crash is not None:
        return crash
    failed = sorted({e.rid for e in trace.events_of("client_error") if e.rid})
    if failed:
        at = min(e.time for e in trace.events_of("client_error"))
        return Outcome("fail", f"failed at {at:g} s: {failed}", at)
    rids = [s.rid for s in trace.config.requests]
    done = {e.rid for e in trace.events_of("streamed")}
    if not set(rids) <= done:
        rid = sorted(set(rids) - done)[0]
        return Outcome(
            "fail", f"{rid} not complete after {trace.end:g} s ({_where(trace, rid)})", trace.end
        )
    at = max(e.time for e in trace.events_of("streamed"))
    held = [s for s in trace.snapshots if s.time >= BACKPRESSURE_S / 2 and s.prealloc[0]]
    if trace.config.memory_full and not held:
        raise SimulationGap(
            "no request waited in the prealloc queue while decode memory was full: the "
            "scenario cannot run the back-pressure path"
        )
    leak = _slots(trace)
    if leak is not None:
        return Outcome("fail", f"completed by {at:g} s, but {leak}", at)
    return Outcome(
        "pass",
        f"{len(rids)}/{len(rids)} waited for memory until {BACKPRESSURE_S:g} s, then completed "
        f"by {at:g} s; none failed",
        at,
    )


def _bounded(trace: DecodeTrace) -> Outcome:
    """The pending request (its room never registered) ends with a client error within the
    waiting timeout (plus the documented lag), and no queue holds it."""
    crash = _crash(trace)
    if crash is not None:
        return crash
    parts: list[str] = []
    verdict = "pass"
    for spec in trace.config.requests:
        pending = [s for s in trace.snapshots if spec.rid in s.pending[0]]
        if not pending:
            raise SimulationGap(
                f"{spec.rid} never waited in the prealloc queue's pending_reqs: the scenario "
                "cannot run the pending path"
            )
        errors = [e for e in trace.events_of("client_error", spec.rid) if e.rank == 0]
        if not errors:
            verdict = "fail"
            parts.append(
                f"{spec.rid}: still pending after {trace.end:g} simulated seconds "
                f"({_where(trace, spec.rid)}): /query_dp_ranks never answers for its room and "
                "nothing bounds the wait"
            )
            continue
        at = errors[0].time
        late = at > WAITING_TIMEOUT + (LAG_STEPS + 1) * trace.config.step
        if late or _where(trace, spec.rid) != "in no queue":
            verdict = "fail"
            parts.append(f"{spec.rid}: failed at {at:g} s but late or still queued")
            continue
        parts.append(f"{spec.rid}: pending from 0 s, failed at {at:g} s with a client error")
    return Outcome(verdict, "; ".join(parts), trace.end)


# -- the prefill half --------------------------------------------------------------------------


def _prefill_deadline(tree: SourceTree, ranks: int) -> Outcome:
    """The release's own prefill (its inflight queue) with a request whose transfer never
    completes: pdguard's inflight deadline must fail it (the prefill ``wedge`` scenario)."""
    target = prefill.load(tree)
    config = prefill_world.WorldConfig(
        (RequestSpec("pair", prefill_s=1.0, transfer_s=None),), ranks, horizon=HORIZON
    )
    trace = prefill_world.simulate(config, target)
    if trace.failure is not None and trace.failure.gap is not None:
        raise SimulationGap(trace.failure.gap)
    return _deadline(WAITING_TIMEOUT, "pair")(trace)


# -- applicability ---------------------------------------------------------------------------


def _retracts(target: DecodeTarget) -> str | None:
    if target.retracts:
        return None
    return "no retraction in this release (DecodePreallocQueue.add takes no is_retracted)"


def _pends(target: DecodeTarget) -> str | None:
    if target.pending_lists:  # a release's pending_reqs, or a fork's own (``parked``)
        return None
    return "no pending_reqs in this release (no _resolve_pending_reqs; 0.5.10+)"


# -- worlds ----------------------------------------------------------------------------------


def _per_backend(target: DecodeTarget, prefix: str, **script: object) -> tuple[DecodeSpec, ...]:
    return tuple(
        DecodeSpec(f"{prefix}-{backend}", backend=backend, **script)  # type: ignore[arg-type]
        for backend in sorted(target.receivers) or [SCRIPTED]
    )


def _gone_world(target: DecodeTarget, ranks: int) -> DecodeConfig:
    return DecodeConfig(_per_backend(target, "gone", transfer_s=None), ranks, horizon=HORIZON)


def _pair_world(target: DecodeTarget, ranks: int) -> DecodeConfig:
    return DecodeConfig(_per_backend(target, "pair", transfer_s=None), ranks, horizon=HORIZON)


def _backpressure_world(target: DecodeTarget, ranks: int) -> DecodeConfig:
    return DecodeConfig(
        _per_backend(target, "full", transfer_s=2.0),
        ranks,
        horizon=BACKPRESSURE_S + 20,
        memory_full=((0.0, BACKPRESSURE_S),),
    )


def _pending_world(target: DecodeTarget, ranks: int) -> DecodeConfig:
    return DecodeConfig(
        _per_backend(target, "unregistered", registered=False),
        ranks,
        horizon=HORIZON,
        prefill_dp_size=2,
    )


def _retracted_world(target: DecodeTarget, ranks: int) -> DecodeConfig:
    retracted = DecodeSpec("retracted", arrival=RETRACT_AT, retracted=True)
    return DecodeConfig(
        (*_per_backend(target, "gone", transfer_s=None), retracted),
        ranks,
        horizon=HORIZON,
        memory_full=((RETRACT_AT, HORIZON + 1),),
    )


DECODE_SCENARIOS: tuple[DecodeScenario, ...] = (
    DecodeScenario(
        "prefill-gone",
        "the prefill goes silent after decode sent its KV indices (no heartbeat failure: its "
        "bootstrap server still answers): each backend's request is failed after the 300 s "
        f"waiting timeout (within {LAG_STEPS} steps) on every rank, client error, KV released, "
        "request-pool and metadata slots free",
        _gone_world,
        _each(_gone),
    ),
    DecodeScenario(
        "prefill-deadline-pair",
        "the prefill's transfer never completes: the release's own prefill fails the request "
        "at pdguard's 300 s inflight deadline, and tells the decode nothing (no release "
        "does); the paired decode request is released by the decode's waiting timeout, KV "
        "and slots freed",
        _pair_world,
        _each(_gone),
        prefill=_prefill_deadline,
    ),
    DecodeScenario(
        "decode-backpressure",
        f"decode memory is full for {BACKPRESSURE_S:g} s (10 minutes) while the prefill is "
        "healthy: the requests wait for memory, then complete; nothing is failed",
        _backpressure_world,
        _never_failed,
    ),
    DecodeScenario(
        "pending-unresolved",
        "the prefill (DP size 2, no follow_bootstrap_room) never registers the room, so "
        "/query_dp_ranks never answers for it: the pending request is failed within the "
        "300 s waiting timeout, client error, no queue holds it",
        _pending_world,
        _bounded,
        _pends,
    ),
    DecodeScenario(
        "retracted-under-pressure",
        "a retracted request waits for memory (full until the end) while another request's "
        "prefill is gone after its indices were sent: that request is still failed at the "
        "300 s waiting timeout, KV released, its slots freed (the retracted one may wait)",
        _retracted_world,
        _retracted_waits(_each(_gone)),
        _retracts,
    ),
)

DECODE_NAMES = tuple(s.name for s in DECODE_SCENARIOS)
