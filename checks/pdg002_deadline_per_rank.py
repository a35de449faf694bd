"""PDG002: the inflight deadline is decided per rank.

What it does
    Reports a deadline check on inflight requests that decides the outcome itself, after the
    poll all-reduce (editing ``poll``, dropping the request) or before it without going through
    the request's sender; and a ``poll`` set on a sender instance (``sender.poll = lambda:
    KVPoll.Failed``): ``abort()`` is the way, and a backend whose ``poll()`` ignores it is
    fixed in its class (PDG008 reports it).

Why is this bad
    ``poll_and_all_reduce*`` MIN-reduces the senders' polls over the TP/CP ranks so that every
    rank takes the same branch for every request. Ranks' clocks and stamps differ; a deadline
    that each rank applies to its own copy of the queue after the reduce (or by dropping the
    request) lets ranks disagree, and the ``zip(queue, polls)`` of later steps desyncs. Failing
    the sender *before* the reduce lets the MIN make the failure unanimous, but only if the
    sender then reports Failed. A method replaced on an instance skips ``poll()``'s own
    bookkeeping (its concluded state, tracing, latency metric) and would not pass review.

Example
    ``if now - req.entered_at > TIMEOUT: poll = KVPoll.Failed`` inside the loop over ``polls``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.fix_names import SENDER_ABORT

from .examples import CALL_HELPER, HELPER, PATCHED, STAMP_ONCE, prefill
from .inflight import FUNCTION
from .model import PREFILL, Finding, Invalid, Rule
from .project import Project

# A release whose senders all report Failed once aborted, and one where NIXL's does not.
HONOURING_SENDERS = """\
class BaseKVSender:
    def abort(self):
        self.conclude_state = KVPoll.Failed


class MooncakeKVSender(BaseKVSender):
    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        return self.kv_mgr.check_status(self.bootstrap_room)
"""
IGNORING_SENDERS = (
    HONOURING_SENDERS
    + """

class NixlKVSender(BaseKVSender):
    def poll(self):
        if not self.has_sent:
            return self.kv_mgr.check_status(self.bootstrap_room)
        return KVPoll.Success if self.done() else KVPoll.WaitingForInput
"""
)
CONN = "sglang/srt/disaggregation/base/conn.py"
PIN_POLL = HELPER.replace(
    "req.disagg_kv_sender.abort()", "req.disagg_kv_sender.poll = lambda: KVPoll.Failed"
)

AFTER_REDUCE = """\
            if time.monotonic() - req.entered_at > TIMEOUT:
                poll = KVPoll.Failed
"""
DROP_BEFORE_REDUCE = """\
        for req in list(self.disagg_prefill_inflight_queue):
            if time.monotonic() - req.entered_at > TIMEOUT:
                self.disagg_prefill_inflight_queue.remove(req)
"""


PINNED = prefill(stamp=STAMP_ONCE, helper=PIN_POLL, before=CALL_HELPER)


class DeadlinePerRank(Rule):
    code = "PDG002"
    name = "deadline-per-rank"
    VALID = (
        PATCHED,
        prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER),
        # abort() where every sender honours it
        {PREFILL: PATCHED, CONN: HONOURING_SENDERS},
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
        Invalid(
            {PREFILL: PINNED, CONN: HONOURING_SENDERS},
            [
                (
                    22,
                    17,
                    "inflight deadline sets `poll` on a sender instance, skipping poll()'s own "
                    "bookkeeping: every sender here reports Failed once aborted; call abort()",
                )
            ],
        ),
        Invalid(
            {PREFILL: PINNED, CONN: IGNORING_SENDERS},
            [
                (
                    22,
                    17,
                    "inflight deadline sets `poll` on a sender instance, skipping poll()'s own "
                    "bookkeeping: make NixlKVSender.poll() report Failed once aborted (the "
                    "sender-abort fix) and call abort()",
                )
            ],
        ),
    )

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        symbol = f"{model.class_name}.{FUNCTION}"
        index = project.classes
        ignoring = [
            s for s in index.senders() if index.is_concrete(s) and not index.abort_honoured(s)
        ]
        for check in model.checks:
            where = symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
            if check.position == "before" and check.poll_set_at is not None:
                line, col = check.poll_set_at
                yield self.finding(
                    PREFILL,
                    line,
                    col + 1,
                    where,
                    "inflight deadline sets `poll` on a sender instance, skipping poll()'s own "
                    "bookkeeping: "
                    + (
                        f"make {', '.join(ignoring)}.poll() report Failed once aborted (the "
                        f"{SENDER_ABORT} fix) and call abort()"
                        if ignoring
                        else "every sender here reports Failed once aborted; call abort()"
                    ),
                )
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
            yield self.finding(PREFILL, check.line, check.col + 1, where, message)
