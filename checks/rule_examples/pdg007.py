"""PDG007's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid
from pdguard.sglang_names import DECODE_PATH, PP_MIXIN_PATH

VALID = (
    # the re-queue bounded by a retry counter that aborts the receiver
    {
        DECODE_PATH: """\
class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
""",
    },
    # bounded by the time since the request's stamp
    {
        DECODE_PATH: """\
class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
""",
    },
    # a deadline the queue enforces on its entries, called from its poll
    {
        DECODE_PATH: """\
class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
""",
    },
    # an early return only when both queues are empty
    {
        DECODE_PATH: """\

""",
    },
    # the gate comes after both polls
    {
        DECODE_PATH: """\
class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
""",
    },
    # the pending bound also runs before the retraction gate, which holds back admission only
    {
        DECODE_PATH: """\
import time

from sglang.srt.disaggregation.utils import poll_and_all_reduce


class DecodePreallocQueue:
    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        unresolved = []
        for decode_req in self.pending_reqs:
            rank = self.lookup(decode_req)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            elif time.monotonic() - decode_req.entered_at > 300:
                decode_req.kv_receiver.abort()
            else:
                unresolved.append(decode_req)
        self.pending_reqs = unresolved

    def pop_preallocated(self):
        self._resolve_pending_reqs()
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

    def poll_pending_reqs(self):
        if self.retracted_queue:
            self._resolve_pending_reqs()


class DecodeTransferQueue:
    def pop_transferred(self):
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        self.disagg_decode_prealloc_queue.poll_pending_reqs()
        retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
        if not retracted_waiting:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
        self.disagg_decode_transfer_queue.pop_transferred()
""",
    },
    # under PP too: the PP loop polls the pending requests, with its consensus, before its gate
    {
        DECODE_PATH: """\
import time

from sglang.srt.disaggregation.utils import poll_and_all_reduce


class DecodePreallocQueue:
    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        unresolved = []
        for decode_req in self.pending_reqs:
            rank = self.lookup(decode_req)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            elif time.monotonic() - decode_req.entered_at > 300:
                decode_req.kv_receiver.abort()
            else:
                unresolved.append(decode_req)
        self.pending_reqs = unresolved

    def pop_preallocated(self, pp_consensus=None):
        self._resolve_pending_reqs()
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

    def poll_pending_reqs(self, pp_consensus=None):
        if self.retracted_queue:
            self._resolve_pending_reqs()


class DecodeTransferQueue:
    def pop_transferred(self):
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        self.disagg_decode_prealloc_queue.poll_pending_reqs()
        retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
        if not retracted_waiting:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
        self.disagg_decode_transfer_queue.pop_transferred()
""",
        PP_MIXIN_PATH: """\
class SchedulerPPMixin:
    def process_prealloc_queue(self, consensus):
        failed = []
        if consensus is not None:
            failed = self.disagg_decode_prealloc_queue.poll_pending_reqs(consensus)
        if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
            return [[], failed]
        good, failed = self.disagg_decode_prealloc_queue.pop_preallocated(consensus)
        self.disagg_decode_transfer_queue.extend(good)
        return [good, failed]
""",
    },
)

INVALID = (
    # re-queued with no counter and no deadline
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def _resolve_pending_reqs(self):
        for decode_req in self.pending_reqs:
                decode_req.kv_receiver.init(rank)
                unresolved.append(decode_req)

        self.pending_reqs = unresolved
        polls = poll_and_all_reduce(receivers, self.gloo_group)
""",
        },
        [
            (
                8,
                17,
                (
                    "a request is put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs, before its KV receiver is initialised) with no "
                    "retry counter or deadline: if the prefill never answers for it, it "
                    "waits forever"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # the deadline is never called
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def _resolve_pending_reqs(self):
        for decode_req in self.pending_reqs:
                decode_req.kv_receiver.init(rank)
                unresolved.append(decode_req)

        self.pending_reqs = unresolved
        polls = poll_and_all_reduce(receivers, self.gloo_group)
""",
        },
        [
            (
                8,
                17,
                (
                    "a request is put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs, before its KV receiver is initialised) with no "
                    "retry counter or deadline: if the prefill never answers for it, it "
                    "waits forever"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # counted, but reaching the limit fails nothing
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def _resolve_pending_reqs(self):
        for decode_req in self.pending_reqs:
                decode_req.kv_receiver.init(rank)
                count = self.retries.get(decode_req.req.rid, 0) + 1
                if count >= MAX_RETRIES:
                    unresolved.append(decode_req)

        self.pending_reqs = unresolved
        polls = poll_and_all_reduce(receivers, self.gloo_group)
""",
        },
        [
            (
                10,
                21,
                (
                    "a request is put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs, before its KV receiver is initialised) with a "
                    "retry counter or deadline whose limit fails nothing (no abort(), no "
                    "prepare_abort(), no KVPoll.Failed): if the prefill never answers for "
                    "it, it waits forever"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # timed, but the stamp is written again on every pass: the wait never grows
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def _resolve_pending_reqs(self):
        for decode_req in self.pending_reqs:
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            else:
                    unresolved.append(decode_req)

        self.pending_reqs = unresolved
        polls = poll_and_all_reduce(receivers, self.gloo_group)
""",
        },
        [
            (
                10,
                21,
                (
                    "a request is put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs, before its KV receiver is initialised) with no "
                    "retry counter or deadline: if the prefill never answers for it, it "
                    "waits forever"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # the retraction gate: a return before either queue is polled
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def pop_preallocated(self):
        receivers = [r.kv_receiver for r in self.queue]
        polls = poll_and_all_reduce(receivers, self.gloo_group)

    def pop_transferred(self):
        polls = poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
            return
        admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(admitted)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
""",
        },
        [
            (
                15,
                13,
                (
                    "SchedulerDisaggregationDecodeMixin.process_decode_queue returns before "
                    "polling disagg_decode_prealloc_queue.pop_preallocated() and "
                    "disagg_decode_transfer_queue.pop_transferred() while "
                    "`len(self.disagg_decode_prealloc_queue.retracted_queue) > 0`: waiting "
                    "timeouts, heartbeat failures and aborts of the requests in those "
                    "queues are not acted on, and their KV is not freed, until the "
                    "condition clears"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # no early return: both polls held under an `if` on the retracted requests
    Invalid(
        {
            DECODE_PATH: """\
from sglang.srt.disaggregation.utils import poll_and_all_reduce

class DecodePreallocQueue:

    def pop_preallocated(self):
        receivers = [r.kv_receiver for r in self.queue]
        polls = poll_and_all_reduce(receivers, self.gloo_group)

    def pop_transferred(self):
        polls = poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        if not self.disagg_decode_prealloc_queue.retracted_queue:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
""",
        },
        [
            (
                14,
                9,
                (
                    "SchedulerDisaggregationDecodeMixin.process_decode_queue polls "
                    "disagg_decode_prealloc_queue.pop_preallocated() and "
                    "disagg_decode_transfer_queue.pop_transferred() only under `if not "
                    "self.disagg_decode_prealloc_queue.retracted_queue`: while that does "
                    "not hold, waiting timeouts, heartbeat failures and aborts of the "
                    "requests in those queues are not acted on, and their KV is not freed"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # the pending bound runs only in pop_preallocated(), behind the retraction gate
    Invalid(
        {
            DECODE_PATH: """\
import time

from sglang.srt.disaggregation.utils import poll_and_all_reduce


class DecodePreallocQueue:
    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        unresolved = []
        for decode_req in self.pending_reqs:
            rank = self.lookup(decode_req)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            elif time.monotonic() - decode_req.entered_at > 300:
                decode_req.kv_receiver.abort()
            else:
                unresolved.append(decode_req)
        self.pending_reqs = unresolved

    def pop_preallocated(self):
        self._resolve_pending_reqs()
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class DecodeTransferQueue:
    def pop_transferred(self):
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
        if not retracted_waiting:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
        self.disagg_decode_transfer_queue.pop_transferred()
""",
        },
        [
            (
                20,
                17,
                (
                    "a request put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs) is bounded only where the polling functions "
                    "call it behind the retraction gate: while retracted requests wait for "
                    "memory the bound never runs, and if the prefill never answers for it, "
                    "it waits as long as they do (reached only behind the gate from "
                    "SchedulerDisaggregationDecodeMixin.process_decode_queue)"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # the non-PP loop polls the pending requests before its gate; the PP loop does not
    Invalid(
        {
            DECODE_PATH: """\
import time

from sglang.srt.disaggregation.utils import poll_and_all_reduce


class DecodePreallocQueue:
    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        unresolved = []
        for decode_req in self.pending_reqs:
            rank = self.lookup(decode_req)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            elif time.monotonic() - decode_req.entered_at > 300:
                decode_req.kv_receiver.abort()
            else:
                unresolved.append(decode_req)
        self.pending_reqs = unresolved

    def pop_preallocated(self, pp_consensus=None):
        self._resolve_pending_reqs()
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

    def poll_pending_reqs(self, pp_consensus=None):
        if self.retracted_queue:
            self._resolve_pending_reqs()


class DecodeTransferQueue:
    def pop_transferred(self):
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        self.disagg_decode_prealloc_queue.poll_pending_reqs()
        retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
        if not retracted_waiting:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
        self.disagg_decode_transfer_queue.pop_transferred()
""",
            PP_MIXIN_PATH: """\
class SchedulerPPMixin:
    def process_prealloc_queue(self, consensus):
        if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
            return [[], []]
        good, failed = self.disagg_decode_prealloc_queue.pop_preallocated(consensus)
        self.disagg_decode_transfer_queue.extend(good)
        return [good, failed]
""",
        },
        [
            (
                20,
                17,
                (
                    "a request put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs) is bounded only where the polling functions "
                    "call it behind the retraction gate: while retracted requests wait for "
                    "memory the bound never runs, and if the prefill never answers for it, "
                    "it waits as long as they do (reached only behind the gate from "
                    "SchedulerPPMixin.process_prealloc_queue)"
                ),
                DECODE_PATH,
            ),
        ],
    ),
    # the method called before the gate runs the bound only while NO retracted request waits,
    # the steps pop_preallocated() runs it on: the two are not complements
    Invalid(
        {
            DECODE_PATH: """\
import time

from sglang.srt.disaggregation.utils import poll_and_all_reduce


class DecodePreallocQueue:
    def add(self, decode_req):
        decode_req.entered_at = time.monotonic()
        self.pending_reqs.append(decode_req)

    def _resolve_pending_reqs(self):
        unresolved = []
        for decode_req in self.pending_reqs:
            rank = self.lookup(decode_req)
            if rank is not None:
                decode_req.kv_receiver.init(rank)
            elif time.monotonic() - decode_req.entered_at > 300:
                decode_req.kv_receiver.abort()
            else:
                unresolved.append(decode_req)
        self.pending_reqs = unresolved

    def pop_preallocated(self, pp_consensus=None):
        self._resolve_pending_reqs()
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)

    def poll_pending_reqs(self, pp_consensus=None):
        if self.retracted_queue:
            return
        self._resolve_pending_reqs()


class DecodeTransferQueue:
    def pop_transferred(self):
        return poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)


class SchedulerDisaggregationDecodeMixin:
    def process_decode_queue(self):
        self.disagg_decode_prealloc_queue.poll_pending_reqs()
        retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
        if not retracted_waiting:
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
        self.disagg_decode_transfer_queue.pop_transferred()
""",
        },
        [
            (
                20,
                17,
                (
                    "a request put back into self.pending_reqs (rebuilt by "
                    "_resolve_pending_reqs) is bounded only where the polling functions "
                    "call it behind the retraction gate: while retracted requests wait for "
                    "memory the bound never runs, and if the prefill never answers for it, "
                    "it waits as long as they do (reached only behind the gate from "
                    "SchedulerDisaggregationDecodeMixin.process_decode_queue)"
                ),
                DECODE_PATH,
            ),
        ],
    ),
)
