"""PDG007: a decode queue keeps a request that waits on the prefill, with no bound.

What it does
    Finds the decode queues (classes that MIN-reduce their requests' receiver polls) and
    reports two places where a request can wait on the prefill for ever:

    - a *re-queue without a bound*: a queue method rebuilds a list of requests whose receiver
      it has not handed on yet (``self.pending_reqs = remaining``, while it calls
      ``kv_receiver.init()`` for the others; or any list it rebuilds from its own entries while
      admitting the others into a list it polls, whatever the entries are: a fork's bare
      requests with no receiver yet), and puts an entry back into it (``append`` or
      ``extend``, also in a helper whose returned list it is) where nothing bounds the wait:
      neither the loop around it (a retry counter or an elapsed-time comparison whose other
      way out fails the request: its ``else``, or the statements after it when the kept path
      ends in ``continue``) nor a deadline the queue enforces on its entries (a loop over
      the queue, reached from its poll methods, that fails an entry once the time since its
      stamp exceeds a limit). A bound counts only where it runs on every step: each polling
      function that reaches it (each decode loop: ``process_decode_queue`` and, under
      pipeline parallelism, the PP mixin's ``process_prealloc_queue``) must reach it through
      a call that is not behind the retraction gate (an ``if``, or an earlier ``return``, on
      a test that reads the retracted requests); one loop that does is not enough. A bound
      only ``pop_preallocated()`` reaches on some loop, itself held back while retracted
      requests wait, is reported, naming that loop: with memory full to the end, the request
      waits as long as they do. ``decode-queue-bound`` runs it before the gate
      (``poll_pending_reqs``, on the PP loop with the stages' consensus);
    - an *early return that skips polling*: a function that polls the decode queues
      (``process_decode_queue``) returns before some of its poll calls, on a condition other
      than "the skipped queues are empty". Skipping only the *admission* (a poll whose popped
      requests it hands to another decode queue: ``pop_preallocated()`` then
      ``disagg_decode_transfer_queue.extend(...)``) while retracted requests wait for memory
      is back-pressure, not reported: those requests hold no KV yet, and the queue whose
      requests do is still polled. That is what ``decode-queue-bound`` makes of the gate;
    - *polls held under an if*: the same skip without a ``return``, the poll calls nested in
      an ``if`` whose condition need not come true again (``if not <retracted requests>:``
      around both polls). Not reported: a condition that only probes the skipped queues'
      emptiness, a throttle (it reads an attribute the function reassigns on every call,
      ``self.polling_count``, also inside a ``try``/``finally`` or
      ``with``), the configuration (no scheduler state but ``server_args``),
      or the retraction gate over admissions only (also through a local flag).
      ``decode-queue-bound`` does not rewrite such a hand-written gate: it refuses.

    The polling functions are read wherever they are: ``decode.py``'s mixin and, under
    pipeline parallelism, ``managers/scheduler_pp_mixin.py`` (0.5.7 - 0.5.23), whose decode
    loop polls the prealloc queue in ``process_prealloc_queue`` and the transfer queue in
    ``process_decode_transfer_queue``. Its retraction gate (``process_prealloc_queue``
    returns ``[[], []]`` while ``retracted_queue`` is not empty) sits before
    ``pop_preallocated()`` only; ``process_decode_transfer_queue`` has none, and the loop
    computes the transfer consensus (``_pp_pd_get_decode_transferred_ids``, polling Success
    and Failed) every step. So it skips admission only: not reported, nothing to patch. A
    decode queue is a class whose own methods MIN-reduce the receivers of the requests it
    holds; the mixin's ``get_rids``, which polls a list it is handed, does not make the mixin
    one.

Why is this bad
    A receiver's own waiting timeout starts only when its KV indices are sent. A request whose
    prefill DP rank never resolves (the prefill lost or rejected the room) is re-queued into
    ``pending_reqs`` every step in SGLang 0.5.10 - 0.5.23, with no counter and no deadline: it
    stays Bootstrapping until a heartbeat failure of the whole prefill or a client abort.
    And while a retracted request waits for memory (0.4.7.post1 - 0.5.23),
    ``process_decode_queue`` returns before polling either queue: timeouts, heartbeat
    failures and aborts of the requests already waiting are not acted on and their KV is not
    freed, so with the running batch drained nothing frees the memory the retracted request
    waits for.

Example
    The retraction gate (0.4.7.post1 - 0.5.23): neither queue is polled while a retracted
    request waits for memory. The ``pending_reqs`` re-queue with no bound is reported too.

    ```python
    def process_decode_queue(self):
        if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
            return
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
    ```

Use instead
    Poll both queues on every step (``decode-queue-bound`` skips only the admission while
    retracted requests wait), and bound every re-queue:

    ```python
    def process_decode_queue(self):
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.sglang_names import DECODE_PATH

from ..project import Project
from ..rule import Finding, Rule

_DECODE = """\
import time

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

MAX_RETRIES = 15
TIMEOUT = 300


class DecodePreallocQueue:
    def __init__(self, kv_manager, gloo_group):
        self.kv_manager = kv_manager
        self.gloo_group = gloo_group
        self.queue = []
        self.pending_reqs = []
        self.retracted_queue = []
        self.retries = {{}}

    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.queue.append(decode_req)
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        remaining = []
        for decode_req in self.pending_reqs:
            rank = self.kv_manager.lookup_rank(decode_req.req.bootstrap_room)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            else:
{requeue}
        self.pending_reqs = remaining
{helper}
    def pop_preallocated(self):
        self._resolve_pending_reqs()
{call_helper}        receivers = [r.kv_receiver for r in self.queue]
        polls = poll_and_all_reduce(receivers, self.gloo_group)
        ready = [r for r, poll in zip(self.queue, polls) if poll == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready


class DecodeTransferQueue:
    def __init__(self, gloo_group):
        self.gloo_group = gloo_group
        self.queue = []

    def extend(self, decode_reqs):
        self.queue.extend(decode_reqs)

    def pop_transferred(self):
        polls = poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)
        done = [r for r, poll in zip(self.queue, polls) if poll == KVPoll.Success]
        self.queue = [r for r in self.queue if r not in done]
        return [r.req for r in done]


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
{gate}        req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(req_conns)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
{late_gate}"""
_INDENT = " " * 16
UNBOUNDED = _INDENT + "remaining.append(decode_req)\n"
COUNTED = f"""\
{_INDENT}count = self.retries.get(decode_req.req.rid, 0) + 1
{_INDENT}self.retries[decode_req.req.rid] = count
{_INDENT}if count >= MAX_RETRIES:
{_INDENT}    decode_req.kv_receiver.abort()
{_INDENT}else:
{_INDENT}    remaining.append(decode_req)
"""
TIMED = f"""\
{_INDENT}if time.monotonic() - decode_req.entered_at > TIMEOUT:
{_INDENT}    decode_req.kv_receiver.abort()
{_INDENT}else:
{_INDENT}    remaining.append(decode_req)
"""
# A deadline the queue enforces on every entry before its poll.
HELPER = """
    def _expire_overdue(self):
        now = time.monotonic()
        for decode_req in self.queue:
            if now - decode_req.entered_at > TIMEOUT:
                decode_req.kv_receiver.abort()
"""
CALL_HELPER = "        self._expire_overdue()\n"
RETRACTION_GATE = """\
        if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
            return
"""


def decode(
    *,
    requeue: str = COUNTED,
    helper: str = "",
    call_helper: str = "",
    gate: str = "",
    late_gate: str = "",
) -> dict[str, str]:
    text = _DECODE.format(
        requeue=requeue, helper=helper, call_helper=call_helper, gate=gate, late_gate=late_gate
    )
    return {DECODE_PATH: text}


_NOT_ACTED_ON = (
    "waiting timeouts, heartbeat failures and aborts of the requests in those queues are not "
    "acted on, and their KV is not freed"
)
_PER_RANK = (
    "the condition reads the scheduler's rank, so some ranks poll and others do not; each "
    "poll all-reduces over the ranks, and those that poll wait for those that do not"
)


class DecodeQueueWaitsForever(Rule):
    code = "PDG007"
    name = "decode-queue-waits-forever"

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.decode_queues
        for requeue in model.requeues():
            if requeue.gated:
                message = (
                    f"a request put back into self.{requeue.attr} (rebuilt by "
                    f"{requeue.method}) is bounded only where the polling functions call it "
                    "behind the retraction gate: while retracted requests wait for memory the "
                    "bound never runs, and if the prefill never answers for it, it waits as "
                    "long as they do"
                    + (
                        f" (reached only behind the gate from {', '.join(requeue.loops)})"
                        if requeue.loops
                        else ""
                    )
                )
            else:
                message = (
                    f"a request is put back into self.{requeue.attr} (rebuilt by "
                    f"{requeue.method}, before its KV receiver is initialised) with "
                    + (
                        "a retry counter or deadline whose limit fails nothing (no abort(), no "
                        "prepare_abort(), no KVPoll.Failed)"
                        if requeue.inert
                        else "no retry counter or deadline"
                    )
                    + ": if the prefill never answers for it, it waits forever"
                )
            yield self.finding(
                requeue.owner.rel,
                requeue.node.lineno,
                requeue.node.col_offset + 1,
                f"{requeue.owner.name}.{requeue.func.name}",
                message,
            )
        for early in model.early_returns():
            where = f"{early.owner.name}.{early.func.name}" if early.owner else early.func.name
            skipped = " and ".join(f"{name.removeprefix('self.')}()" for name in early.skipped)
            condition = f" while `{early.condition}`" if early.condition else ""
            yield self.finding(
                early.rel,
                early.node.lineno,
                early.node.col_offset + 1,
                where,
                f"{where} returns before polling {skipped}{condition}: "
                + (_PER_RANK if early.per_rank else _NOT_ACTED_ON + ", until the condition clears"),
            )
        for guarded in model.guarded_polls():
            where = (
                f"{guarded.owner.name}.{guarded.func.name}" if guarded.owner else guarded.func.name
            )
            skipped = " and ".join(f"{name.removeprefix('self.')}()" for name in guarded.skipped)
            yield self.finding(
                guarded.rel,
                guarded.node.lineno,
                guarded.node.col_offset + 1,
                where,
                f"{where} polls {skipped} only under `if {guarded.condition}`: "
                + (_PER_RANK if guarded.per_rank else "while that does not hold, " + _NOT_ACTED_ON),
            )
