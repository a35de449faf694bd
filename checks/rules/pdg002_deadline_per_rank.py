"""PDG002: the inflight deadline is decided per rank.

What it does
    Reports a deadline check on inflight requests that decides the outcome itself, after the
    poll all-reduce (editing ``poll``, dropping the request) or before it without going through
    the request's sender; and a ``poll`` set on a sender instance (``sender.poll = lambda:
    KVPoll.Failed``): ``abort()`` is the way, and a backend whose ``poll()`` ignores it is
    fixed in its class (PDG008 reports it). Under pipeline parallelism (the inflight function
    takes the stages' consensus, ``rids_to_check``), it also reports a deadline that can fail a
    request whose sender this stage already polls as transferred.

Why is this bad
    ``poll_and_all_reduce*`` MIN-reduces the senders' polls over the TP/CP ranks so that every
    rank takes the same branch for every request. Ranks' clocks and stamps differ; a deadline
    that each rank applies to its own copy of the queue after the reduce (or by dropping the
    request) lets ranks disagree, and the ``zip(queue, polls)`` of later steps desyncs. Failing
    the sender *before* the reduce lets the MIN make the failure unanimous, but only if the
    sender then reports Failed. A method replaced on an instance skips ``poll()``'s own
    bookkeeping (its concluded state, tracing, latency metric) and would not pass review.

    PP stages are ranks too, but no all-reduce joins them: each stage reports the requests
    its own poll says ended, the stages keep those all of them report, and that list reaches
    each stage a round after the one before, where every stage ends each request by its own
    poll. A stage that aborts a request it already polled Success for (the list is still on
    its way to it) turns its own poll into Failed: that stage answers with an error, the
    others with success, for the same request.

Example
    The deadline decided in the loop over the reduced states, by each rank on its own clock:

    ```python
    states = poll_and_all_reduce(senders, self.tp_cpu_group)
    ...
    for req, state in zip(self.disagg_prefill_inflight_queue, states):
        if time.monotonic() - req.entered_at > TIMEOUT:
            state = KVPoll.Failed
    ```

Use instead
    Fail the sender before the all-reduce, so that the MIN makes the failure unanimous. Under
    PP, also leave a transfer this stage already polls as ended to the stages' consensus
    (``if state not in (KVPoll.Success, KVPoll.Failed)`` before ``abort()``).

    ```python
    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()


    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.fix_names import SENDER_ABORT
from pdguard.sglang_names import PP_CONSENSUS_PARAM

from ..models.inflight import FUNCTION, NEXT_STEP, unfailed_senders
from ..project import Project
from ..rule import PREFILL, Finding, Rule

PP_MESSAGE = (
    "inflight deadline can fail a request this PP stage already polls as transferred: the "
    "stages' consensus (rids_to_check) ends it with success elsewhere; leave requests whose "
    "sender's poll() says Success to it"
)


class DeadlinePerRank(Rule):
    code = "PDG002"
    name = "deadline-per-rank"

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        symbol = f"{model.class_name}.{FUNCTION}"
        index = project.classes
        ignoring = [
            s for s in index.senders() if index.is_concrete(s) and not index.abort_honoured(s)
        ]
        stages = PP_CONSENSUS_PARAM in {a.arg for a in model.function.args.args}
        for check in model.checks:
            if check.never:
                continue  # it fails no overdue request at all: PDG001 says why
            where = symbol if check.method == FUNCTION else f"{model.class_name}.{check.method}"
            if (
                stages
                and check.each_step
                and check.fails_sender
                and not check.minds_ended_poll
                and not check.skipped_under_pp  # PDG001 reports that one: no PP deadline
            ):
                yield self.finding(PREFILL, check.line, check.col + 1, where, PP_MESSAGE)
            if check.each_step and check.poll_set_at is not None:
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
            elif check.rank_gate:
                message = (
                    f"inflight deadline fails the request's sender only where "
                    f"`{check.rank_gate}`: ranks act differently on the same request; fail it "
                    "on every rank before the poll all-reduce"
                )
            elif check.position == NEXT_STEP and check.drops:
                message = (
                    "inflight deadline takes the request out of the queue on this rank: ranks "
                    "can disagree; fail it through its sender and keep it for the next reduce"
                )
            elif unfailed := unfailed_senders(check, index):
                calls = ", ".join(f"{m}()" for m in sorted(check.sender_calls - {"poll"}))
                message = (
                    f"inflight deadline calls {calls} on the request's sender, which does not "
                    f"make {', '.join(unfailed)}.poll() report Failed: the request stays, "
                    "with no bound; call abort()"
                )
            else:
                continue
            yield self.finding(PREFILL, check.line, check.col + 1, where, message)
