"""The decode side's corpus: shapes no PyPI release has, each with its ground truth.

Every case is pdguard's own hand-written, SGLang-shaped code (no SGLang source). ``expect`` is
the set of rule codes ``pdguard check`` must report on it: empty for a tree where no request
waits without bound (any finding is a false positive), the hazard's codes for one where a
request does (a missing code is a false negative). ``why`` is the ground truth: what happens
at run time, where a request waits. ``python -m tests.corpus_decode`` prints the counts.

Every tree also runs under ``simulate`` / ``check --confirm`` (``runnable``: the prefill DP
rank from /query_dp_ranks as releases resolve it, bare arrivals, a Failed path), and the
simulation agrees with each ``why`` (``tests/simulate/test_confirm_corpus.py``).
"""

from __future__ import annotations

from pdguard.checks.rules.pdg007_decode_queue_waits_forever import (
    _INDENT,
    CALL_HELPER,
    HELPER,
    TIMED,
    UNBOUNDED,
    decode,
)
from pdguard.sglang_names import DECODE_PATH
from tests.corpus import Case, verdicts

# -- a fork's prealloc queue: bare requests wait for their prefill DP rank ---------------------
# The requests are kept in a list of their own, with no receiver yet; a receiver is created
# (not ``init()``-ed) once the rank is known, and the request admitted into ``self.queue``.
_FORK = """\
import time

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import CommonKVReceiver
from sglang.srt.disaggregation.utils import (
    KVClassType,
    get_kv_class,
    poll_and_all_reduce,
    prepare_abort,
)

RANK_WAIT_LIMIT = 300.0


class DecodeRequest:
    def __init__(self, req, kv_receiver):
        self.req = req
        self.kv_receiver = kv_receiver


class DecodePreallocQueue:
    def __init__(self, kv_manager, transfer_backend, gloo_group):
        # own-words: the queue keeps what a release's constructor is given, by its names
        self.kv_manager = kv_manager
        self.transfer_backend = transfer_backend
        self.gloo_group = gloo_group
        self.queue = []
        self.retracted_queue = []
        self.awaiting_rank = []

    def add(self, req, is_retracted=False):
        if is_retracted:
            self.retracted_queue.append(req)
        else:
            req.awaiting_since = time.monotonic()
            self.awaiting_rank.append(req)

    def _admit_awaiting(self):
        still_waiting = []
        for req in self.awaiting_rank:
            room_to_rank = CommonKVReceiver.query_prefill_dp_ranks(
                _bootstrap_addr(req), [req.bootstrap_room]
            )
            rank = room_to_rank.get(str(req.bootstrap_room))
            if rank is None:
{keep}
            receiver = get_kv_class(self.transfer_backend, KVClassType.RECEIVER)(
                # own-words: a receiver is built with its constructor's own keywords
                mgr=self.kv_manager,
                bootstrap_addr=_bootstrap_addr(req),
                bootstrap_room=req.bootstrap_room,
                prefill_dp_rank=int(rank),
            )
            self.queue.append(DecodeRequest(req, receiver))
        self.awaiting_rank = still_waiting

    def pop_preallocated(self):
        self._admit_awaiting()
        polls = poll_and_all_reduce([r.kv_receiver for r in self.queue], self.gloo_group)
{pop}


{rest}"""
# -- what makes a tree runnable by the simulation, as SGLang's own decode.py has it -----------
# The prefill DP rank resolved as releases 0.5.10+ do (``_resolve_pending_reqs``): the prefill
# bootstrap server's /query_dp_ranks, through ``CommonKVReceiver.query_prefill_dp_ranks``; it
# answers only for rooms the prefill registered. Requests arrive bare (``add(req,
# is_retracted=False)``) and get their receiver from ``get_kv_class``; the prealloc queue
# fails a Failed receiver's request (client error) and sends the indices of a WaitingForInput
# one; the transfer queue fails a Failed one and frees its KV. The hazard of each case is in
# the lines the case writes (the re-queue, the bound, the gate), never here.
_BOOTSTRAP_ADDR = """

def _bootstrap_addr(req):
    return f"{req.bootstrap_host}:{req.bootstrap_port}"
"""
# each queue's Failed path: the client gets an error, the request leaves the queue
_FAILED = """\
        for decode_req, poll in zip(self.queue, polls):
            if poll == KVPoll.Failed:
                failed.append(decode_req)
                prepare_abort(decode_req.req, "KV transfer failed")
                self.scheduler.stream_output([decode_req.req], decode_req.req.return_logprob)
"""
_POP = (
    "        ready, failed = [], []\n"
    + _FAILED
    + """\
            elif poll == KVPoll.WaitingForInput:
                if self._allocatable_tokens() < len(decode_req.req.origin_input_ids):
                    continue  # no room for its KV yet: it waits in the queue
                ready.append(decode_req)
                kv_indices = self._pre_alloc(decode_req.req)
                index = self.req_to_metadata_buffer_idx_allocator.alloc()
                decode_req.metadata_buffer_index = index
                decode_req.kv_receiver.send_metadata(kv_indices, index)
        self.queue = [r for r in self.queue if r not in ready and r not in failed]
        return ready
"""
)
_TRANSFERRED = (
    "        done, failed = [], []\n"
    + _FAILED
    + """\
                self.tree_cache.cache_finished_req(decode_req.req)
            elif poll == KVPoll.Success:
                done.append(decode_req)
            else:
                continue
            self.req_to_metadata_buffer_idx_allocator.free(decode_req.metadata_buffer_index)
        self.queue = [r for r in self.queue if r not in done and r not in failed]
        return [r.req for r in done]
"""
)
# what the PDG007 examples' builder writes, and what a runnable tree has instead
_SHAPES = (
    (
        "from sglang.srt.disaggregation.utils import poll_and_all_reduce\n",
        "from sglang.srt.disaggregation.common.conn import CommonKVReceiver\n"
        "from sglang.srt.disaggregation.utils import (\n    KVClassType,\n    get_kv_class,\n"
        "    poll_and_all_reduce,\n    prepare_abort,\n)\n",
    ),
    (
        "TIMEOUT = 300\n",
        "TIMEOUT = 300\n"
        + _BOOTSTRAP_ADDR
        + """

class DecodeRequest:
    def __init__(self, req, kv_receiver):
        self.req = req
        self.kv_receiver = kv_receiver
""",
    ),
    (
        "    def __init__(self, kv_manager, gloo_group):\n        self.kv_manager = kv_manager\n",
        "    def __init__(self, kv_manager, transfer_backend, gloo_group):\n"
        "        self.kv_manager = kv_manager\n        self.transfer_backend = transfer_backend\n",
    ),
    (
        """\
    def add(self, decode_req):
        decode_req.entered_at""",
        """\
    def add(self, req, is_retracted=False):
        if is_retracted:
            self.retracted_queue.append(req)
            return
        kv_receiver = get_kv_class(self.transfer_backend, KVClassType.RECEIVER)(
            # own-words: a receiver is built with its constructor's own keywords
            mgr=self.kv_manager,
            bootstrap_addr=_bootstrap_addr(req),
            bootstrap_room=req.bootstrap_room,
        )
        decode_req = DecodeRequest(req, kv_receiver)
        decode_req.entered_at""",
    ),
    (
        "            rank = self.kv_manager.lookup_rank(decode_req.req.bootstrap_room)\n",
        """\
            room = decode_req.req.bootstrap_room
            room_to_rank = CommonKVReceiver.query_prefill_dp_ranks(
                _bootstrap_addr(decode_req.req), [room]
            )
            rank = room_to_rank.get(str(room))
""",
    ),
    (
        """\
        ready = [r for r, poll in zip(self.queue, polls) if poll == KVPoll.WaitingForInput]
        self.queue = [r for r in self.queue if r not in ready]
        return ready
""",
        _POP,
    ),
    (
        """\
        done = [r for r, poll in zip(self.queue, polls) if poll == KVPoll.Success]
        self.queue = [r for r in self.queue if r not in done]
        return [r.req for r in done]
""",
        _TRANSFERRED,
    ),
)


def runnable(text: str) -> str:
    """The PDG007 examples' decode.py, SGLang-shaped where the simulation runs it (above)."""
    for old, new in _SHAPES:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _decode(**parts: str) -> str:
    return runnable(decode(**parts)[DECODE_PATH])


_I = " " * 16
FORK_UNBOUNDED = f"{_I}still_waiting.append(req)\n{_I}continue\n"
# bounded: stamped once; once the wait exceeds the limit, aborted, answered and dropped
FORK_TIMED = f"""\
{_I}if getattr(req, "awaiting_since", None) is None:
{_I}    req.awaiting_since = time.monotonic()
{_I}if time.monotonic() - req.awaiting_since > RANK_WAIT_LIMIT:
{_I}    prepare_abort(req, "prefill DP rank not resolved")
{_I}    self.scheduler.stream_output([req], req.return_logprob)
{_I}else:
{_I}    still_waiting.append(req)
{_I}continue
"""
_POLLS = """\
        req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(req_conns)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
"""
# upstream's polling throttle (0.5.10+), inside a fork's try/finally that times the step
_THROTTLE = """\
        if not hasattr(self, "polling_count"):
            self.polling_count = 0
            self.polling_interval = 4
        self.polling_count = (self.polling_count + 1) % self.polling_interval
        if self.polling_count % self.polling_interval == 0:
"""
THROTTLE_IN_TRY = (
    "        started = time.monotonic()\n        try:\n"
    + "".join("    " + line for line in _THROTTLE.splitlines(keepends=True))
    + "".join("            " + line for line in _POLLS.splitlines(keepends=True))
    + "        finally:\n            self.decode_queue_seconds = time.monotonic() - started\n"
)
# the same try/finally around a gate that need not clear: polls skipped while it holds
GATE_IN_TRY = (
    "        started = time.monotonic()\n        try:\n"
    + "            if not self.disagg_decode_prealloc_queue.retracted_queue:\n"
    + "".join("            " + line for line in _POLLS.splitlines(keepends=True))
    + "        finally:\n            self.decode_queue_seconds = time.monotonic() - started\n"
)
# done requests held until their KV may be released: bounded by a stored deadline, and
# admitting nothing (not a pending list)
DEFERRED = """
    def defer_release(self, decode_req, timeout):
        self.deferred.append((decode_req, time.monotonic() + timeout))

    def resolve_deferred(self):
        now = time.monotonic()
        still_held = []
        for decode_req, deadline in self.deferred:
            if not decode_req.kv_receiver.drained() and now < deadline:
                still_held.append((decode_req, deadline))
            else:
                self.release(decode_req)
        self.deferred = still_held
"""
DEFERRED_INIT = "        self.deferred = []\n"
DEFERRED_PROCESS = "        self.disagg_decode_transfer_queue.resolve_deferred()\n" + _POLLS


def fork(
    keep: str = FORK_UNBOUNDED,
    process: str = _POLLS,
    transfer_extra: str = "",
    transfer_init: str = "",
) -> str:
    """The fork's prealloc queue, then the PDG007 examples' transfer queue (runnable) and
    scheduler, its ``process_decode_queue`` body ``process``."""
    release = _decode()
    rest = release[release.index("class DecodeTransferQueue:") :].replace(_POLLS, process)
    rest = rest.replace(
        "        self.queue = []\n\n    def extend(",
        "        self.queue = []\n" + transfer_init + transfer_extra + "\n    def extend(",
        1,
    )
    text = _FORK.format(keep=keep.rstrip("\n"), pop=_POP.rstrip("\n"), rest=rest)
    return text.replace("\n\nclass DecodeRequest:", _BOOTSTRAP_ADDR + "\n\nclass DecodeRequest:", 1)


# -- the release-shaped pending_reqs re-queue, bound written with early ``continue`` ----------
CONTINUE_BOUND = f"""\
{_INDENT}if time.monotonic() - decode_req.entered_at <= TIMEOUT:
{_INDENT}    remaining.append(decode_req)
{_INDENT}    continue
{_INDENT}decode_req.kv_receiver.abort()
"""
CONTINUE_INERT = CONTINUE_BOUND.replace("decode_req.kv_receiver.abort()", "print(decode_req)")


def _case(name: str, files: dict[str, str], expect: str = "", why: str = "") -> Case:
    return Case(name, files, frozenset(c for c in expect.split(",") if c), why)


CASES: tuple[Case, ...] = (
    # --- correct: no request waits without bound ------------------------------------------
    _case(
        "early-continue-bound",
        {DECODE_PATH: _decode(requeue=CONTINUE_BOUND)},
        why="the kept path continues; an overdue request falls through to abort(), so its "
        "receiver reports Failed and the queue's Failed path drops it: as the `else` form",
    ),
    _case(
        "throttle-in-try-finally",
        {DECODE_PATH: fork(FORK_TIMED, process=THROTTLE_IN_TRY)},
        why="polling_count is advanced on every call (inside try, before the test), so the "
        "polls run every polling_interval calls: a throttle, whatever the try around it",
    ),
    _case(
        "fork-pending-timed",
        {DECODE_PATH: fork(keep=FORK_TIMED)},
        why="a bare request stamped once and failed once it has waited RANK_WAIT_LIMIT",
    ),
    _case(
        "deferred-release-list",
        {DECODE_PATH: fork(FORK_TIMED, DEFERRED_PROCESS, DEFERRED, DEFERRED_INIT)},
        why="a list of done requests held until their KV may be freed, with a stored "
        "deadline: it admits nothing, no request in it waits for the prefill",
    ),
    # --- unsafe: a request waits without bound --------------------------------------------
    _case(
        "fork-pending-bare-requests",
        {DECODE_PATH: fork()},
        "PDG007",
        why="a request whose prefill DP rank never resolves is put back into awaiting_rank "
        "every step; it has no receiver yet, so no receiver clock runs: it waits forever",
    ),
    _case(
        "early-continue-inert",
        {DECODE_PATH: _decode(requeue=CONTINUE_INERT)},
        "PDG007",
        why="the overdue path falls through to a print(): the request is dropped from "
        "pending_reqs but stays in the queue with a receiver that never sees init()",
    ),
    _case(
        "pending-mixed-clocks",
        {
            DECODE_PATH: _decode(requeue=TIMED).replace(
                "decode_req.entered_at = time.monotonic()", "decode_req.entered_at = time.time()"
            )
        },
        "PDG007",
        why="stamped with time.time() (about 1.7e9) and read on time.monotonic() (seconds "
        "since boot): the difference is far below zero, the limit is never exceeded",
    ),
    _case(
        "entry-deadline-mixed-clocks",
        {
            DECODE_PATH: _decode(requeue=UNBOUNDED, helper=HELPER, call_helper=CALL_HELPER).replace(
                "decode_req.entered_at = time.monotonic()", "decode_req.entered_at = time.time()"
            )
        },
        "PDG007",
        why="the queue's deadline on its entries compares a monotonic now with a wall stamp: "
        "it never fires",
    ),
    _case(
        "gate-in-try-finally",
        {DECODE_PATH: fork(FORK_TIMED, process=GATE_IN_TRY)},
        "PDG007",
        why="while a retracted request waits, neither queue is polled: timeouts and "
        "aborts are not acted on, whatever the try around the gate",
    ),
)


def score() -> tuple[list[str], list[str]]:
    """(false positives, false negatives) over this corpus, as "case: codes" lines."""
    found = [(case, verdicts(case)) for case in CASES]
    return (
        [f"{c.name}: {', '.join(sorted(got))}" for c, got in found if c.correct and got],
        [
            f"{c.name}: missing {', '.join(sorted(c.expect - got))}"
            for c, got in found
            if c.expect - got
        ],
    )


if __name__ == "__main__":
    fps, fns = score()
    unsafe = sum(not c.correct for c in CASES)
    print(f"{len(CASES)} cases; false positives {len(fps)}/{len(CASES) - unsafe}: {fps}")
    print(f"false negatives {len(fns)}/{unsafe}: {fns}")
