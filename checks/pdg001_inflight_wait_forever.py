"""PDG001: an inflight request can wait forever.

What it does
    In ``process_disagg_prefill_inflight_queue``, finds every place a request is kept for
    another step (appended to the list that becomes the inflight queue) and reports each one
    when no deadline bounds the wait.

Why is this bad
    Requests are kept on every non-terminal poll result: WaitingForInput, Transferring,
    Bootstrapping, unexpected states, the PP "not in consensus" branch, parked
    ``pending_bootstrap`` requests. If decode restarts, none of them ever turns terminal and the
    deployment wedges (``decode_running=0``). A deadline counts only when the request is stamped
    where it enters the queue and the deadline is enforced, before the poll all-reduce, on every
    call of the function (directly or in a method it calls), by failing the request's sender.

Example
    A release as shipped (no deadline) is reported at each ``undone_reqs.append(req)``;
    ``pdguard apply`` adds the stamp and ``_fail_timed_out_inflight_reqs()``.
"""

from __future__ import annotations

from collections.abc import Iterator

from .examples import CALL_HELPER, HELPER, INLINE_DEADLINE, PATCHED, STAMP_ONCE, prefill
from .inflight import FUNCTION, QUEUE, InflightModel
from .model import PREFILL, Finding, Invalid, Rule
from .project import Project


class InflightWaitForever(Rule):
    code = "PDG001"
    name = "inflight-wait-forever"
    VALID = (
        PATCHED,
        prefill(stamp=STAMP_ONCE, before=INLINE_DEADLINE),
    )
    INVALID = (
        Invalid(
            prefill(),  # no deadline at all
            [
                (
                    26,
                    17,
                    "request kept in the inflight queue with no deadline: "
                    "nothing fails a request that waits too long",
                )
            ],
        ),
        Invalid(
            prefill(helper=HELPER, before=CALL_HELPER),  # enforced, never stamped
            [
                (
                    33,
                    17,
                    "request kept in the inflight queue with no deadline: "
                    "requests are not stamped where they enter disagg_prefill_inflight_queue",
                )
            ],
        ),
        Invalid(
            prefill(stamp=STAMP_ONCE, helper=HELPER),  # helper defined but not called
            [
                (
                    34,
                    17,
                    "request kept in the inflight queue with no deadline: "
                    "nothing fails a request that waits too long",
                )
            ],
        ),
        Invalid(
            prefill(
                stamp=STAMP_ONCE,
                helper=HELPER,
                before="        if self.tp_rank == 0:\n            self._expire_inflight()\n",
            ),  # not on every call
            [
                (
                    36,
                    17,
                    "request kept in the inflight queue with no deadline: "
                    "the deadline does not run before the poll all-reduce on every call",
                )
            ],
        ),
    )

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None or model.valid_checks():
            return
        why = _why(model)
        symbol = f"{model.class_name}.{FUNCTION}"
        for site in model.keep_sites:
            yield self.finding(
                PREFILL,
                site.lineno,
                site.col_offset + 1,
                symbol,
                f"request kept in the inflight queue with no deadline: {why}",
            )


def _why(model: InflightModel) -> str:
    if not model.checks:
        return "nothing fails a request that waits too long"
    if not model.stamped_attrs():
        return f"requests are not stamped where they enter {QUEUE}"
    if not any(c.position == "before" for c in model.checks):
        return "the deadline does not run before the poll all-reduce on every call"
    return "the deadline does not fail the request's sender"
