"""PDG003: the inflight deadline's clock starts too early, restarts, or carries over.

What it does
    Reports a deadline on inflight requests measured from something set before the request
    entered the inflight queue (the sender's ``init_time``, the arrival time, a stamp taken when
    the sender is created); a stamp rewritten while the request waits in the queue (on keep);
    and a stamp kept from a request's first entry (``if getattr(req, "t", None) is None``) in a
    module with a path that takes requests out of the queue and back (a method that sends a
    request back to the waiting or bootstrap queue, optimistic prefill's
    ``optimistic_release_and_requeue``) without clearing it. Where the queue holds parked
    requests (``pending_bootstrap``, 0.5.16+), a deadline that counts their wait for bootstrap,
    and, under PP (``rids_to_check``), one that skips every parked request whatever its sender
    polls.

Why is this bad
    The inflight queue holds requests whose prefill is done; the deadline must measure the KV
    transfer only. Measured from sender creation or arrival, it includes the prefill itself and
    false-fails long prompts (a 512K-token prefill takes about 164 s). A stamp rewritten on
    every keep restarts the clock, so the deadline never fires. A request that stays in the
    queue never passes an entry again, so a stamp at every entry is right; one kept from the
    first entry only matters for a request that left and came back, and then counts its wait
    and its second prefill against the deadline: it can be failed on its first poll. A parked
    request's bootstrap is bounded by the bootstrap timeout, not the deadline; but once it has
    bootstrapped a PP stage never unparks it (its parked branch runs only for the requests the
    stages agreed have ended), so a deadline that skips it still lets it wait for ever.

Example
    A deadline measured from the sender's creation, which also counts the prefill (too early).
    Also reported: ``req.entered_at = time.monotonic()`` where the request is kept (restarts),
    and the first stamp kept beside a method that sends requests back (carries over).

    ```python
    for req in self.disagg_prefill_inflight_queue:
        if now - req.disagg_kv_sender.init_time > TIMEOUT:
            req.disagg_kv_sender.abort()
    ```

Use instead
    Measure from a stamp taken at every entry into the inflight queue:

    ```python
    for req in batch.reqs:
        # a fresh deadline at every entry
        req.entered_at = time.monotonic()
        self.disagg_prefill_inflight_queue.append(req)
    ...
    for req in self.disagg_prefill_inflight_queue:
        if now - req.entered_at > TIMEOUT:
            req.disagg_kv_sender.abort()
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.sglang_names import PP_CONSENSUS_PARAM

from ..models.inflight import FUNCTION, QUEUE, InflightModel
from ..project import Project
from ..rule import PREFILL, Finding, Rule


class DeadlineClock(Rule):
    code = "PDG003"
    name = "deadline-clock"

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        symbol = f"{model.class_name}.{FUNCTION}"
        stamped = model.stamped_attrs()
        for check in model.checks:
            where = symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
            if check.via_sender or (check.attr not in stamped and check.attr in _assigned(model)):
                source = "the sender's" if check.via_sender else "the request's"
                yield self.finding(
                    PREFILL,
                    check.line,
                    check.col + 1,
                    where,
                    f"inflight deadline measured from {source} `{check.attr}`, set before the "
                    f"request entered {QUEUE}: it counts prefill time too",
                )
        for check in model.checks:
            stamp_clock = model.mixed_clock(check)
            if stamp_clock is not None and not check.never:
                where = symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
                yield self.finding(
                    PREFILL,
                    check.line,
                    check.col + 1,
                    where,
                    f"inflight deadline reads now on {check.clock} against `{check.attr}`, "
                    f"stamped on {stamp_clock}: the two clocks share no origin, so the "
                    "difference is no elapsed time and the deadline never fires",
                )
        measured = {c.attr for c in model.checks}
        for entry in model.entries:
            stamp = model.stamps.get(id(entry.stmt))
            if stamp is None or not stamp.guarded or stamp.attr not in measured:
                continue
            back = next((b for b in model.send_backs if stamp.attr not in b.resets), None)
            if back is not None:
                yield self.finding(
                    PREFILL,
                    stamp.line,
                    stamp.col + 1,
                    symbol,
                    f"`{stamp.attr}` keeps the stamp of a request's first entry, but "
                    f"{back.method}() (line {back.line}) sends requests back to {back.queue}, "
                    f"from where they enter {QUEUE} again: their wait and second prefill "
                    "count against the deadline; stamp at every entry",
                )
        if model.parked_line:
            for check in model.checks:
                if check.each_step and not check.minds_parked:
                    where = (
                        symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
                    )
                    yield self.finding(
                        PREFILL,
                        check.line,
                        check.col + 1,
                        where,
                        f"inflight deadline counts the time a request is parked (line "
                        f"{model.parked_line}: prefill done, bootstrap not), which the bootstrap "
                        "timeout bounds: skip parked requests and start their deadline when "
                        "they are unparked",
                    )
            pp = any(a.arg == PP_CONSENSUS_PARAM for a in model.function.args.args)
            for check in model.checks:
                if pp and check.each_step and check.parked_skip is not None:
                    line, col = check.parked_skip
                    where = (
                        symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
                    )
                    yield self.finding(
                        PREFILL,
                        line,
                        col + 1,
                        where,
                        "inflight deadline skips every parked request, whatever its sender "
                        "polls: under PP a stage reaches its parked branch (line "
                        f"{model.parked_line}) only for the requests in {PP_CONSENSUS_PARAM}, "
                        "which one whose bootstrap completed never is, so it is never unparked "
                        "and waits for ever; skip a parked request only while its sender polls "
                        "Bootstrapping",
                    )
        changed = [
            (
                stamp,
                "is cleared where the request is kept in the inflight queue: the deadline "
                "has no start to measure from",
            )
            for stamp in model.clears
        ] + [
            (
                stamp,
                "is rewritten while the request waits in the inflight queue: the deadline "
                "restarts and never fires",
            )
            for stamp in model.restamps
        ]
        for stamp, what in changed:
            if stamp.attr in measured:
                yield self.finding(
                    PREFILL, stamp.line, stamp.col + 1, symbol, f"`{stamp.attr}` {what}"
                )


def _assigned(model: InflightModel) -> set[str]:
    return model.assigned_attrs
