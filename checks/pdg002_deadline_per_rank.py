"""PDG002: the inflight deadline is decided per rank.

What it does
    Reports a deadline check on inflight requests that decides the outcome itself, after the
    poll all-reduce (editing ``poll``, dropping the request) or before it without going through
    the request's sender.

Why is this bad
    ``poll_and_all_reduce*`` MIN-reduces the senders' polls over the TP/CP ranks so that every
    rank takes the same branch for every request. Ranks' clocks and stamps differ; a deadline
    that each rank applies to its own copy of the queue after the reduce (or by dropping the
    request) lets ranks disagree, and the ``zip(queue, polls)`` of later steps desyncs. Failing
    the sender *before* the reduce lets the MIN make the failure unanimous.

Example
    ``if now - req.entered_at > TIMEOUT: poll = KVPoll.Failed`` inside the loop over ``polls``.
"""

from __future__ import annotations

from collections.abc import Iterator

from .examples import CALL_HELPER, HELPER, PATCHED, STAMP_ONCE, prefill
from .inflight import FUNCTION
from .model import PREFILL, Finding, Invalid, Rule
from .project import Project

AFTER_REDUCE = """\
            if time.monotonic() - req.entered_at > TIMEOUT:
                poll = KVPoll.Failed
"""
DROP_BEFORE_REDUCE = """\
        for req in list(self.disagg_prefill_inflight_queue):
            if time.monotonic() - req.entered_at > TIMEOUT:
                self.disagg_prefill_inflight_queue.remove(req)
"""


class DeadlinePerRank(Rule):
    code = "PDG002"
    name = "deadline-per-rank"
    VALID = (
        PATCHED,
        prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER),
    )
    INVALID = (
        Invalid(
            prefill(stamp=STAMP_ONCE, after=AFTER_REDUCE),
            [
                (
                    27,
                    16,
                    "inflight deadline decided after the poll all-reduce: ranks can disagree; "
                    "fail the request's sender before the all-reduce",
                )
            ],
        ),
        Invalid(
            prefill(stamp=STAMP_ONCE, before=DROP_BEFORE_REDUCE),
            [
                (
                    22,
                    16,
                    "inflight deadline does not fail the request's sender: the reduced poll "
                    "will not say Failed on every rank",
                )
            ],
        ),
    )

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        symbol = f"{model.class_name}.{FUNCTION}"
        for check in model.checks:
            if check.position == "after":
                message = (
                    "inflight deadline decided after the poll all-reduce: ranks can disagree; "
                    "fail the request's sender before the all-reduce"
                )
            elif not check.fails_sender:
                message = (
                    "inflight deadline does not fail the request's sender: the reduced poll "
                    "will not say Failed on every rank"
                )
            else:
                continue
            where = symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
            yield self.finding(PREFILL, check.line, check.col + 1, where, message)
