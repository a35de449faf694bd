"""PDG003: the inflight deadline's clock starts too early or restarts.

What it does
    Reports a deadline on inflight requests measured from something set before the request
    entered the inflight queue (the sender's ``init_time``, the arrival time, a stamp taken when
    the sender is created), and a stamp that is written again when a request is re-queued.

Why is this bad
    The inflight queue holds requests whose prefill is done; the deadline must measure the KV
    transfer only. Measured from sender creation or arrival, it includes the prefill itself and
    false-fails long prompts (a 512K-token prefill takes about 164 s). A stamp rewritten on
    every re-queue restarts the clock, so the deadline never fires.

Example
    ``if now - req.disagg_kv_sender.init_time > TIMEOUT`` (too early), or
    ``req.entered_at = time.monotonic()`` before an append that re-queues (restarts).
"""

from __future__ import annotations

from collections.abc import Iterator

from .examples import CALL_HELPER, HELPER, PATCHED, STAMP_ALWAYS, STAMP_ONCE, prefill
from .inflight import FUNCTION, QUEUE, InflightModel
from .model import PREFILL, Finding, Invalid, Rule
from .project import Project

FROM_SENDER_CREATION = HELPER.replace("req.entered_at", "req.disagg_kv_sender.init_time")
RESTAMP_ON_KEEP = "                req.entered_at = time.monotonic()\n"


class DeadlineClock(Rule):
    code = "PDG003"
    name = "deadline-clock"
    VALID = (PATCHED,)
    INVALID = (
        Invalid(
            prefill(stamp=STAMP_ONCE, helper=FROM_SENDER_CREATION, before=CALL_HELPER),
            [
                (
                    21,
                    16,
                    "inflight deadline measured from the sender's `init_time`, set before the "
                    "request entered disagg_prefill_inflight_queue: it counts prefill time too",
                )
            ],
        ),
        Invalid(
            prefill(stamp=STAMP_ALWAYS, helper=HELPER, before=CALL_HELPER),
            [
                (
                    14,
                    13,
                    "`entered_at` is stamped again whenever a request is (re-)queued: the "
                    "deadline restarts; stamp only when it is not set yet",
                )
            ],
        ),
        Invalid(
            prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER, keep=RESTAMP_ON_KEEP),
            [
                (
                    35,
                    17,
                    "`entered_at` is rewritten while the request waits in the inflight queue: "
                    "the deadline restarts and never fires",
                )
            ],
        ),
    )

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
        measured = {c.attr for c in model.checks}
        for entry in model.entries:
            stamp = model.stamps.get(id(entry.stmt))
            if stamp is not None and not stamp.guarded and stamp.attr in measured:
                yield self.finding(
                    PREFILL,
                    stamp.line,
                    stamp.col + 1,
                    symbol,
                    f"`{stamp.attr}` is stamped again whenever a request is (re-)queued: the "
                    "deadline restarts; stamp only when it is not set yet",
                )
        for stamp in model.restamps:
            if stamp.attr in measured:
                yield self.finding(
                    PREFILL,
                    stamp.line,
                    stamp.col + 1,
                    symbol,
                    f"`{stamp.attr}` is rewritten while the request waits in the inflight "
                    "queue: the deadline restarts and never fires",
                )


def _assigned(model: InflightModel) -> set[str]:
    return model.assigned_attrs
