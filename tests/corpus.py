"""Shapes no PyPI release has: hand-written fixes in other styles, fork shapes, hostile input.

Every case is pdguard's own hand-written, SGLang-shaped code (no SGLang source). ``expect`` is
the set of rule codes ``pdguard check`` must report on it: empty for a correct tree (any finding
is a false positive), the codes of the hazard for an unsafe one (a missing code is a false
negative). ``python -m tests.corpus`` prints the false positives and negatives.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from pdguard.sglang_names import BASE_CONN_PATH, DISAGGREGATION_DIR, INFLIGHT_FUNCTION
from pdguard.sglang_names import PREFILL_PATH as PREFILL

BASE_CONN = BASE_CONN_PATH
BACKEND_CONN = f"{DISAGGREGATION_DIR}/forkbackend/conn.py"

_HEAD = """\
from __future__ import annotations

import logging
{imports}

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.utils import (
    KVClassType,
    get_kv_class,
    poll_and_all_reduce,
    prepare_abort,
)

logger = logging.getLogger(__name__)
INFLIGHT_TIMEOUT = 300.0


class PrefillBootstrapQueue:
    def add(self, req):
        backend = get_kv_class(self.transfer_backend, KVClassType.SENDER)
        req.disagg_kv_sender = backend(self.kv_manager, "fork", req.bootstrap_room)
        self.queue.append(req)

    def pop_bootstrapped(self):
        ready, waiting = [], []
        if self.queue:
            states = poll_and_all_reduce([r.disagg_kv_sender for r in self.queue], self.gloo_group)
            for req, state in zip(self.queue, states):
                (ready if state == KVPoll.WaitingForInput else waiting).append(req)
        self.queue = waiting
        return ready


class SchedulerDisaggregationPrefillMixin:
"""

# The entry point: finished prefills enter the inflight queue.
_ENTER_APPEND = """
    def process_batch_result_disagg_prefill(self, batch, result):
        for req in batch.reqs:
            self.send_kv_chunk(req, last_chunk=True)
{stamp_before}            self.disagg_prefill_inflight_queue.append(req)
{stamp_after}"""

# A helper that fails overdue requests through their sender.
_EXPIRE = """
    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.{attr} > INFLIGHT_TIMEOUT:
                req.disagg_kv_sender.abort()
"""

_INFLIGHT = """
    def {function}(self):
        if not self.disagg_prefill_inflight_queue:
            return []
{before}        reduced = poll_and_all_reduce(
            [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue],
            self.tp_cpu_group,
        )
        kept, ended = [], []
        for req, state in zip(self.disagg_prefill_inflight_queue, reduced):
            if state == KVPoll.Success:
                ended.append(req)
            elif {failed_test}:
                req.disagg_kv_sender.abort()
                ended.append(req)
                prepare_abort(req, "KV transfer to the decode side failed")
            else:
                kept.append(req)
        self.disagg_prefill_inflight_queue = kept
        for req in ended:
            self.tree_cache.cache_finished_req(req)
        self.stream_output(ended, False)
        return ended
"""

# Stamped once: a request that is handed back keeps its first stamp (correct wherever nothing
# takes a request out of the queue and back, as in every case here).
STAMP_BEFORE = """\
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
"""
STAMP_AFTER = STAMP_BEFORE
CALL_EXPIRE = "        self._expire_inflight()\n"

# The stamp kept by the scheduler in a map by request id, not on the request.
STAMP_BY_RID = "            self.handed_over_at[req.rid] = time.monotonic()\n"
_READ_ATTR = "now - req.entered_at > INFLIGHT_TIMEOUT"
READ_BY_RID = "now - self.handed_over_at.get(req.rid, now) > INFLIGHT_TIMEOUT"


def prefill(
    *,
    imports: str = "import time",
    stamp_before: str = STAMP_BEFORE,
    stamp_after: str = "",
    enter: str | None = None,
    expire: bool = True,
    attr: str = "entered_at",
    function: str = "process_disagg_prefill_inflight_queue",
    before: str = CALL_EXPIRE,
    failed_test: str = "state == KVPoll.Failed",
    extra: str = "",
) -> str:
    """A prefill.py whose holes are filled; the defaults give a correct deadline."""
    text = _HEAD.format(imports=imports)
    text += (
        enter
        if enter is not None
        else _ENTER_APPEND.format(stamp_before=stamp_before, stamp_after=stamp_after)
    )
    if expire:
        text += _EXPIRE.format(attr=attr)
    text += _INFLIGHT.format(function=function, before=before, failed_test=failed_test)
    return text + extra


def _enter(body: str) -> str:
    head = "\n    def process_batch_result_disagg_prefill(self, batch, result):\n"
    send = "for req in batch.reqs:\n    self.send_kv_chunk(req, last_chunk=True)\n"
    return head + textwrap.indent(send + textwrap.dedent(body), " " * 8)


_BASE = """\
class KVPoll:
    # the all-reduce keeps the lowest state over the ranks
    Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


class BaseKVSender:
    def poll(self): ...

    def abort(self): ...
"""

# A fork's stand-in backend: Bootstrapping until init() is called, then Transferring until its
# manager has sent the room. Its ``init_time`` is a state flag that drives poll(), not a clock.
_STATE_FLAG_SENDER = """\
from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class StubKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, room):
        self.bootstrap_room = room
        self.kv_mgr = mgr
        self.init_time = None  # set by init(): a flag, not a time

    def init(self, num_kv_indices, aux_index=None):
        self.init_time = num_kv_indices

    def poll(self):
        if self.init_time is None:
            return KVPoll.Bootstrapping
        sent = self.kv_mgr.sent(self.bootstrap_room)
        return KVPoll.Success if sent else KVPoll.Transferring
"""

# The same flag, read in one conditional expression.
_STATE_FLAG_ONE_LINE = _STATE_FLAG_SENDER.replace(
    """        if self.init_time is None:
            return KVPoll.Bootstrapping
        sent = self.kv_mgr.sent(self.bootstrap_room)
        return KVPoll.Success if sent else KVPoll.Transferring
""",
    """        started = self.init_time is not None
        return self._progress() if started else KVPoll.Bootstrapping

    def _progress(self):
        return KVPoll.Success if self.kv_mgr.sent(self.bootstrap_room) else KVPoll.Transferring
""",
)
assert _STATE_FLAG_ONE_LINE != _STATE_FLAG_SENDER

# A sender whose poll() reads the manager through an ``or``.
_OR_POLL_SENDER = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class ForkKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, room):
        self.kv_mgr = mgr
        self.bootstrap_room = room
        self.conclude_state = None
        self.init_time = time.time()
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

    def abort(self):
        self.kv_mgr.update_status(self.bootstrap_room, KVPoll.Failed)

    def poll(self):
        status = self.conclude_state or self.kv_mgr.check_status(self.bootstrap_room)
        if status != KVPoll.Bootstrapping:
            return status
        if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
            return KVPoll.Failed
        return status
"""


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, str]
    expect: frozenset[str] = field(default_factory=frozenset)  # rule codes check must report
    why: str = ""

    @property
    def correct(self) -> bool:
        return not self.expect


def _case(name: str, prefill_text: str, expect: str = "", why: str = "", **more: str) -> Case:
    files = {PREFILL: prefill_text, BASE_CONN: _BASE, **more}
    return Case(name, files, frozenset(c for c in expect.split(",") if c), why)


CASES: tuple[Case, ...] = (
    # --- correct trees in styles no release has: any finding is a false positive ---------
    _case("stamp-before-append", prefill(), why="the baseline: stamp, then append"),
    _case(
        "stamp-after-append",
        prefill(stamp_before="", stamp_after=STAMP_AFTER),
        why="nothing can poll the request between the append and the next line",
    ),
    _case(
        "stamp-in-helper",
        prefill(
            stamp_before="            self._note_entry(req)\n",
            extra="\n    def _note_entry(self, req):\n"
            + "        if getattr(req, 'entered_at', None) is None:\n"
            + "            req.entered_at = time.monotonic()\n",
        ),
    ),
    _case(
        "extend-stamped",
        prefill(
            enter=_enter(
                """\
                for req in batch.reqs:
                    if getattr(req, "entered_at", None) is None:
                        req.entered_at = time.monotonic()
                self.disagg_prefill_inflight_queue.extend(batch.reqs)
                """
            )
        ),
        why="a batch stamped in a loop, then extended",
    ),
    _case(
        "failed-or-abort",
        prefill(failed_test="state == KVPoll.Failed or req.to_abort"),
        why="a fork's Failed branch that also takes aborted requests",
    ),
    _case(
        "failed-in-tuple",
        prefill(failed_test="state in (KVPoll.Failed,)"),
    ),
    _case(
        "perf-counter-alias",
        prefill(imports="from time import perf_counter as now\nimport time"),
        why="a clock imported under another name",
    ),
    _case(
        "or-poll-sender",
        prefill(),
        why="a sender whose poll() reads check_status() behind an `or`, with its own timeout",
        **{BACKEND_CONN: _OR_POLL_SENDER},
    ),
    # --- unsafe trees: a missing code is a false negative ---------------------------------
    _case("no-deadline", prefill(expire=False, before=""), "PDG001"),
    _case(
        "renamed-function",
        prefill(expire=False, before="", function="process_inflight_transfers"),
        "PDG000",
        why="the inflight function is renamed: pdguard cannot model it and must say so",
    ),
    _case(
        "extend-unstamped",
        prefill(
            enter=_enter(
                """\
                for req in batch.reqs:
                    if getattr(req, "entered_at", None) is None:
                        req.entered_at = time.monotonic()
                    self.disagg_prefill_inflight_queue.append(req)
                self.disagg_prefill_inflight_queue.extend(batch.retried)
                """
            )
        ),
        "PDG001",
        why="requests entering through extend() are never stamped: the deadline skips them",
    ),
    _case(
        "insert-unstamped",
        prefill(
            enter=_enter(
                """\
                for req in batch.reqs:
                    if getattr(req, "entered_at", None) is None:
                        req.entered_at = time.monotonic()
                    self.disagg_prefill_inflight_queue.append(req)
                self.disagg_prefill_inflight_queue.insert(0, batch.urgent)
                """
            )
        ),
        "PDG001",
    ),
    _case(
        "iadd-unstamped",
        prefill(
            enter=_enter(
                """\
                for req in batch.reqs:
                    if getattr(req, "entered_at", None) is None:
                        req.entered_at = time.monotonic()
                    self.disagg_prefill_inflight_queue.append(req)
                self.disagg_prefill_inflight_queue += batch.retried
                """
            )
        ),
        "PDG001",
    ),
    _case(
        "datetime-time-shadow",
        prefill(imports="import time\nfrom datetime import time"),
        "PDG005",
        why="`time` is datetime.time: time.monotonic() raises at runtime",
    ),
    _case(
        "state-flag-init-time",
        prefill(),
        "PDG004",
        why="init_time is a state flag driving poll(), not a clock: no timeout can fire",
        **{BACKEND_CONN: _STATE_FLAG_SENDER},
    ),
    _case(
        "state-flag-init-time-one-line",
        prefill(),
        "PDG004",
        why="the same flag, read in a conditional expression (through a local)",
        **{BACKEND_CONN: _STATE_FLAG_ONE_LINE},
    ),
    _case(
        "stamp-by-rid",
        prefill(stamp_before=STAMP_BY_RID).replace(_READ_ATTR, READ_BY_RID),
        why="the stamp lives in the scheduler's map by rid, and the deadline reads it there",
    ),
    _case(
        "stamp-by-rid-read-elsewhere",
        prefill(stamp_before=STAMP_BY_RID).replace(
            _READ_ATTR, READ_BY_RID.replace("handed_over_at", "queued_at")
        ),
        "PDG001",
        why="the deadline reads another map than the one stamped: it never fires",
    ),
    _case(
        "stamp-by-rid-restamped",
        prefill(stamp_before=STAMP_BY_RID)
        .replace(_READ_ATTR, READ_BY_RID)
        .replace(
            "                kept.append(req)\n",
            "                self.handed_over_at[req.rid] = time.monotonic()\n"
            "                kept.append(req)\n",
        ),
        "PDG003",
        why="the map's stamp is renewed on every step the request waits: the deadline restarts",
    ),
    _case(
        "deadline-after-all-reduce",
        prefill(
            before="",
            extra="",
        ).replace(
            "        kept, ended = [], []\n",
            "        self._expire_inflight()\n        kept, ended = [], []\n",
        ),
        "PDG001,PDG002",
    ),
)

# --- issue 20: one meaning of a bounded wait (ground truth written before the detectors) --------
_QUEUE = "self.disagg_prefill_inflight_queue"
_STAMP_LINE = "                req.entered_at = time.monotonic()\n"
_KEEP = "                kept.append(req)\n"
_OVERDUE = "            if now - req.entered_at > INFLIGHT_TIMEOUT:\n"
_ABORT = "                req.disagg_kv_sender.abort()\n"
_REBUILT = f"        {_QUEUE} = kept\n"

# A backend whose abort() concludes Failed for poll(), with a fail() that aborts, and a
# release() that frees buffers and leaves poll() as it was.
_CONCLUDING_SENDER = """\
from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class ForkKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, room):
        self.kv_mgr, self.bootstrap_room = mgr, room
        self.conclude_state = None  # what poll() answers once concluded

    def poll(self):
        "The concluded state first, then the status of the room."
        if self.conclude_state is not None:
            return self.conclude_state
        answer = self.kv_mgr.check_status(self.bootstrap_room)
        return answer

    def release(self):
        self.kv_mgr.free(self.bootstrap_room)

    def fail(self, reason):
        self.kv_mgr.note(self.bootstrap_room, reason)
        self.abort()

    def abort(self):
        # poll() answers Failed from now on
        self.conclude_state = KVPoll.Failed
"""


def _expiring(line: str = _OVERDUE, body: str = _ABORT, head: str = "") -> str:
    """``_expire_inflight`` with another test (``line``) and overdue branch (``body``)."""
    return prefill(expire=False) + (
        "\n    def _expire_inflight(self):\n"
        "        now = time.monotonic()\n"
        f"{head}        for req in {_QUEUE}:\n{line}{body}"
    )


def _entering(body: str) -> str:
    """A correct tree whose entry point also puts ``batch.retried`` in, unstamped, by ``body``."""
    return prefill(
        enter=_enter(
            textwrap.dedent(
                """\
            for req in batch.reqs:
                if getattr(req, "entered_at", None) is None:
                    req.entered_at = time.monotonic()
                self.disagg_prefill_inflight_queue.append(req)
                """
            )
            + textwrap.dedent(body)
        )
    )


def _wall_deadline(test: str) -> str:
    """A deadline stored at entry on the wall clock, and a sweep with its own ``test``."""
    return prefill(
        stamp_before="            req.give_up_at = time.time() + INFLIGHT_TIMEOUT\n",
        expire=False,
    ) + (f"\n    def _expire_inflight(self):\n        for req in {_QUEUE}:\n{test}" + _ABORT)


_SEMANTICS: tuple[Case, ...] = (
    # correct: any finding is a false positive
    _case(
        "deadline-stored-at-entry",
        prefill(
            stamp_before=(
                "            req.inflight_deadline = time.monotonic() + INFLIGHT_TIMEOUT\n"
            ),
            expire=False,
        )
        + (
            "\n    def _expire_inflight(self):\n        now = time.monotonic()\n"
            f"        for req in {_QUEUE}:\n"
            "            if now > req.inflight_deadline:\n" + _ABORT
        ),
        why="the entry stores when the wait must end; the sweep compares now with it",
    ),
    _case(
        "failed-at-end-of-step",
        prefill(before="").replace(_REBUILT, _REBUILT + "        self._expire_inflight()\n"),
        why="kept requests aborted through their sender after the reduce: the next step's MIN "
        "reduce makes the failure unanimous",
    ),
    _case(
        "time-left-continue",
        _expiring(
            "            if now - req.entered_at < INFLIGHT_TIMEOUT:\n                continue\n",
            _ABORT.replace("    ", "", 1),
        ),
        why="the kept path continues; the overdue one falls through to abort()",
    ),
    _case(
        "deadline-time-left",
        _expiring("            if INFLIGHT_TIMEOUT <= now - req.entered_at:\n"),
        why="the limit on the left: the same test",
    ),
    _case(
        "fail-method-that-aborts",
        _expiring(body='                req.disagg_kv_sender.fail("inflight timeout")\n'),
        why="fail() calls abort(), which makes this backend's poll() report Failed",
        **{BACKEND_CONN: _CONCLUDING_SENDER},
    ),
    _case(
        "deadline-stored-on-wall-clock",
        _wall_deadline("            if req.give_up_at - time.time() <= 0:\n"),
        why="a wall-clock deadline read on the wall clock, as the time left",
    ),
    # unsafe: a missing code is a false negative
    _case(
        "deadline-stored-mixed-clocks",
        _wall_deadline("            if time.monotonic() > req.give_up_at:\n"),
        "PDG003",
        why="a time.time() deadline against time.monotonic(): never reached",
    ),
    _case(
        "failed-at-end-of-step-and-dropped",
        prefill(before="")
        .replace(_REBUILT, _REBUILT + "        self._expire_inflight()\n")
        .replace(f"        for req in {_QUEUE}:\n", f"        for req in list({_QUEUE}):\n")
        .replace(_ABORT, _ABORT + f"                {_QUEUE}.remove(req)\n"),
        "PDG002",
        why="aborted, then dropped on this rank: the next reduce never sees it here",
    ),
    _case(
        "mixed-clocks",
        prefill(stamp_before=STAMP_BEFORE.replace("monotonic", "time")),
        "PDG003",
        why="a time.time() stamp read on time.monotonic(): the difference is hugely negative",
    ),
    _case(
        "fail-action-that-does-not-fail",
        _expiring(body="                req.disagg_kv_sender.release()\n"),
        "PDG002",
        why="release() frees buffers; ForkKVSender.poll() still says Transferring",
        **{BACKEND_CONN: _CONCLUDING_SENDER},
    ),
    _case(
        "flipped-comparison",
        _expiring("            if now - req.entered_at < INFLIGHT_TIMEOUT:\n"),
        "PDG001",
        why="aborts the requests still within their time; never the overdue ones",
    ),
    _case(
        "swapped-difference",
        _expiring("            if req.entered_at - now > INFLIGHT_TIMEOUT:\n"),
        "PDG001",
        why="entry - now is never positive: never true",
    ),
    _case(
        "return-first",
        _expiring(head="        return\n"),
        "PDG001",
        why="the helper returns before its loop",
    ),
    _case(
        "break-first",
        _expiring("            break\n" + _OVERDUE),
        "PDG001",
        why="the loop breaks before the test",
    ),
    _case(
        "if-false",
        _expiring(head="        if False:\n").replace(
            f"        for req in {_QUEUE}:\n{_OVERDUE}{_ABORT}",
            f"            for req in {_QUEUE}:\n    {_OVERDUE}    {_ABORT}",
        ),
        "PDG001",
    ),
    _case(
        "only-in-except-of-try-pass",
        _expiring(head="        try:\n            pass\n        except Exception:\n").replace(
            f"        for req in {_QUEUE}:\n{_OVERDUE}{_ABORT}",
            f"            for req in {_QUEUE}:\n    {_OVERDUE}    {_ABORT}",
        ),
        "PDG001",
    ),
    _case(
        "only-in-lambda",
        _expiring(
            "            late = lambda r: now - r.entered_at > INFLIGHT_TIMEOUT\n",
            "            req.disagg_kv_sender.abort()\n",
        ),
        "PDG001",
        why="the test is defined, never used: every request is aborted, or none bounded",
    ),
    _case(
        "timeout-forced-to-inf",
        prefill() + '\n\nINFLIGHT_TIMEOUT = float("inf")\n',
        "PDG001",
        why="the limit is rebound to infinity after the definition: the test never holds",
    ),
    _case(
        "stamp-set-to-none-on-keep",
        prefill().replace(_KEEP, "                req.entered_at = None\n" + _KEEP),
        "PDG003",
    ),
    _case(
        "stamp-deleted-on-keep",
        prefill().replace(_KEEP, "                del req.entered_at\n" + _KEEP),
        "PDG003",
    ),
    _case(
        "stamp-setattr-none-on-keep",
        prefill().replace(_KEEP, '                setattr(req, "entered_at", None)\n' + _KEEP),
        "PDG003",
    ),
    _case(
        "failed-branch-keeps",
        prefill().replace(
            "                req.disagg_kv_sender.abort()\n                ended.append(req)\n",
            "                req.disagg_kv_sender.abort()\n" + _KEEP,
        ),
        "PDG001",
        why="a Failed request is kept: it is re-polled Failed, and kept, every step",
    ),
    _case(
        "entry-getattr",
        _entering(f'getattr(self, "{_QUEUE[5:]}").extend(batch.retried)\n'),
        "PDG000",
    ),
    _case(
        "entry-bound-method",
        _entering(f"add = {_QUEUE}.append\nfor r in batch.retried:\n    add(r)\n"),
        "PDG000",
    ),
    _case("entry-starred", _entering(f"{_QUEUE} = [*{_QUEUE}, *batch.retried]\n"), "PDG000"),
    _case(
        "entry-setattr",
        _entering(f'setattr(self, "{_QUEUE[5:]}", {_QUEUE} + batch.retried)\n'),
        "PDG000",
    ),
    _case("entry-map", _entering(f"list(map({_QUEUE}.append, batch.retried))\n"), "PDG000"),
    _case(
        "entry-dict",
        _entering(f'self.__dict__["{_QUEUE[5:]}"].extend(batch.retried)\n'),
        "PDG000",
    ),
    _case("entry-vars", _entering(f'vars(self)["{_QUEUE[5:]}"].extend(batch.retried)\n'), "PDG000"),
    _case(
        "entry-tuple-alias",
        _entering(f"q, n = {_QUEUE}, len(batch.retried)\nq.extend(batch.retried)\n"),
        "PDG000",
    ),
    _case(
        "decorated-inflight-function",
        prefill(extra="\n\ndef _legacy(function):\n    return lambda self: []\n").replace(
            f"    def {INFLIGHT_FUNCTION}",
            f"    @_legacy\n    def {INFLIGHT_FUNCTION}",
        ),
        "PDG000",
        why="the decorator replaces the function the proof reads",
    ),
    _case(
        "class-attribute-after-def",
        prefill(extra="\n    process_disagg_prefill_inflight_queue = _expire_inflight\n"),
        "PDG000",
    ),
    _case(
        "module-assignment-after-def",
        prefill(
            extra="\n\nSchedulerDisaggregationPrefillMixin._expire_inflight = lambda self: None\n"
        ),
        "PDG000",
    ),
    _case(
        "setattr-abort",
        prefill(extra='\n\nsetattr(BaseKVSender, "abort", lambda self: None)\n'),
        "PDG000",
    ),
    _case(
        "mixin-defined-again",
        prefill(
            extra="\n\nclass SchedulerDisaggregationPrefillMixin:\n"
            f"    def {INFLIGHT_FUNCTION}(self):\n        return []\n"
        ),
        "PDG000",
    ),
)
CASES += _SEMANTICS


def verdicts(case: Case) -> set[str]:
    """The rule codes ``pdguard check`` reports on ``case`` (the static rules: ``check
    --confirm``'s second witness is measured by ``tests/simulate/confirm_corpus.py``)."""
    from pdguard.checks import STATIC_CODES, Project, run

    return {f.code for f in run(Project(case.files), STATIC_CODES)}


def score() -> tuple[list[str], list[str]]:
    """(false positives, false negatives) over the corpus, as "case: codes" lines."""
    fps, fns = [], []
    for case in CASES:
        got = verdicts(case)
        if case.correct and got:
            fps.append(f"{case.name}: {', '.join(sorted(got))}")
        missing = case.expect - got
        if missing:
            fns.append(f"{case.name}: missing {', '.join(sorted(missing))}")
    return fps, fns


if __name__ == "__main__":
    fps, fns = score()
    correct = sum(c.correct for c in CASES)
    print(f"{len(CASES)} cases: {correct} correct, {len(CASES) - correct} unsafe")
    print(f"false positives: {len(fps)}/{correct}")
    for line in fps:
        print("  " + line)
    print(f"false negatives: {len(fns)}/{len(CASES) - correct}")
    for line in fns:
        print("  " + line)
