"""Decode-side verdicts (PDG006, PDG007) on hand-written fixes in styles pdguard was not
built from: a receiver's timeout in a helper that returns a test, on nanoseconds, on the time
left, a ``match`` on the status, a stamp taken on the first poll; a pending re-queue bounded
through a stamp kept by request id or a helper; decode polls held under an ``if``. Snippets in
pdguard's own words; each case was a wrong verdict before the model was fixed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pdguard.checks import Project, run
from pdguard.checks.rule_examples.pdg006 import _BASE
from pdguard.checks.rules.pdg007_decode_queue_waits_forever import RETRACTION_GATE, decode
from pdguard.cli import main
from tests.helpers import copy_release

_RECEIVER = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll

LIMIT = 300


class MooncakeKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr = mgr
        self.room = bootstrap_room
        self.settled = None
        self.mark = None
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.room, kv_indices)
{stamp}
    def poll(self):
        if self.settled is not None:
            return self.settled
{body}
{extra}"""
_READ = """\
        now_status = self.kv_mgr.check_status(self.room)
        if now_status in (KVPoll.Success, KVPoll.Failed):
            self.settled = now_status
            return now_status
"""


def _pdg006(body: str, stamp: str = "", extra: str = "") -> list[str]:
    text = _RECEIVER.format(stamp=stamp, body=body, extra=extra)
    project = Project(
        {
            "sglang/srt/disaggregation/base/conn.py": _BASE,
            "sglang/srt/disaggregation/mooncake/conn.py": text,
        }
    )
    return [f.message for f in run(project, ["PDG006"])]


# -- receivers ------------------------------------------------------------------------


def test_a_clock_started_on_the_first_poll_is_early_not_missing() -> None:
    """The prealloc queue polls the receiver before its indices are sent: a stamp the first
    poll takes counts the wait for decode memory (it was reported as no timeout at all)."""
    body = (
        _READ
        + """\
        if self.mark is None:
            self.mark = time.monotonic()
        elif time.monotonic() - self.mark > LIMIT:
            self.settled = KVPoll.Failed
            return KVPoll.Failed
        return now_status
"""
    )
    messages = _pdg006(body)
    assert len(messages) == 1, messages
    assert "wrong clock" in messages[0]
    assert "counts from before the indices were sent" in messages[0]
    assert "wait forever" not in messages[0]


def test_a_clock_started_when_waiting_is_first_seen_is_early() -> None:
    """Stamped where WaitingForInput is first seen (in the prealloc queue), and the failure
    stored but returned only by the next poll (``settled or now_status``: Failed is 0)."""
    body = (
        _READ
        + """\
        if now_status == KVPoll.WaitingForInput:
            if self.mark is None:
                self.mark = time.time()
            if time.time() - self.mark >= LIMIT:
                self.settled = KVPoll.Failed
        return self.settled or now_status
"""
    )
    messages = _pdg006(body)
    assert len(messages) == 1, messages
    assert "wrong clock" in messages[0]
    assert "wait forever" not in messages[0]
    assert "Bootstrapping" not in messages[0]


_SENT = "        self.mark = time.monotonic()\n"


@pytest.mark.parametrize(
    ("stamp", "body", "extra"),
    [
        # the test lives in a helper that returns it; failing in another helper
        (
            "        self.mark = time.monotonic() + LIMIT\n",
            _READ
            + """\
        if self._overdue():
            return self._give_up()
        return now_status
""",
            """\
    def _overdue(self):
        return self.mark is not None and time.monotonic() >= self.mark

    def _give_up(self):
        self.kv_mgr.record_failure(self.room, "the prefill went quiet")
        self.settled = KVPoll.Failed
        return self.settled
""",
        ),
        # nanoseconds, scaled to milliseconds before the comparison
        (
            "        self.mark = time.monotonic_ns()\n",
            _READ
            + """\
        if self.mark is not None and (time.monotonic_ns() - self.mark) // 10**6 > LIMIT * 1000:
            self.settled = KVPoll.Failed
            return KVPoll.Failed
        return now_status
""",
            "",
        ),
        # the time left before a deadline
        (
            "        self.mark = time.monotonic() + LIMIT\n",
            _READ
            + """\
        if self.mark is not None:
            left = self.mark - time.monotonic()
            if left <= 0:
                return KVPoll.Failed
        return now_status
""",
            "",
        ),
        # a match on the status, the timeout as a guard
        (
            _SENT,
            """\
        now_status = self.kv_mgr.check_status(self.room)
        match now_status:
            case KVPoll.Success | KVPoll.Failed:
                self.settled = now_status
            case KVPoll.WaitingForInput if (
                self.mark is not None and time.monotonic() - self.mark > LIMIT
            ):
                self.settled = KVPoll.Failed
                return KVPoll.Failed
        return now_status
""",
            "",
        ),
        # the elapsed time named in the test (walrus), the failure returned by a conditional
        (
            _SENT,
            _READ
            + """\
        if self.mark is not None and (waited := time.monotonic() - self.mark) > LIMIT:
            self.kv_mgr.record_failure(self.room, f"no answer in {waited:.0f}s")
            self.settled = KVPoll.Failed
        return self.settled if self.settled is not None else now_status
""",
            "",
        ),
    ],
    ids=["helper-returns-the-test", "nanoseconds-scaled", "time-left", "match-guard", "walrus"],
)
def test_a_bounded_receiver_in_another_style_is_not_reported(
    stamp: str, body: str, extra: str
) -> None:
    assert _pdg006(body, stamp, extra) == []


def test_a_match_on_the_status_without_a_timeout_is_reported() -> None:
    """Every ``case`` was skipped as an unknown statement: the receiver fell off the end of
    ``poll()`` (None, not a status) and passed."""
    body = """\
        match self.kv_mgr.check_status(self.room):
            case KVPoll.Success | KVPoll.Failed as done:
                self.settled = done
                return done
            case KVPoll.Transferring if self.mark is not None and (
                time.monotonic() - self.mark > LIMIT
            ):
                return KVPoll.Failed
            case other:
                return other
"""
    messages = _pdg006(body, _SENT)
    assert len(messages) == 1, messages
    assert "can wait forever" in messages[0]
    assert "WaitingForInput" in messages[0]
    assert "Transferring" not in messages[0]  # the guarded case bounds it


# -- decode queues ----------------------------------------------------------------------

_I = " " * 16


def _pdg007(files: dict[str, str]) -> list[str]:
    return [f.message for f in run(Project(files), ["PDG007"])]


@pytest.mark.parametrize(
    ("requeue", "helper"),
    [
        # the first time the rank went unresolved, kept by request id; read into a local
        (
            f"""\
{_I}first = self.retries.setdefault(decode_req.req.rid, time.monotonic())
{_I}if time.monotonic() - first > TIMEOUT:
{_I}    self.retries.pop(decode_req.req.rid, None)
{_I}    decode_req.kv_receiver.abort()
{_I}else:
{_I}    remaining.append(decode_req)
""",
            "",
        ),
        # the deadline in a helper that returns the test
        (
            f"""\
{_I}if self._overdue(decode_req):
{_I}    decode_req.kv_receiver.abort()
{_I}else:
{_I}    remaining.append(decode_req)
""",
            """
    def _overdue(self, decode_req):
        since = self.retries.setdefault(decode_req.req.rid, time.monotonic())
        return time.monotonic() - since > TIMEOUT
""",
        ),
    ],
    ids=["stamp-by-rid", "helper-returns-the-test"],
)
def test_a_bounded_pending_requeue_in_another_style_is_not_reported(
    requeue: str, helper: str
) -> None:
    assert _pdg007(decode(requeue=requeue, helper=helper)) == []


def test_a_stamp_taken_afresh_each_pass_still_is_no_bound() -> None:
    """Reading a kept stamp into a local is no restamp; stamping the clock itself is."""
    requeue = f"""\
{_I}first = time.monotonic()
{_I}if time.monotonic() - first > TIMEOUT:
{_I}    decode_req.kv_receiver.abort()
{_I}else:
{_I}    remaining.append(decode_req)
"""
    messages = _pdg007(decode(requeue=requeue))
    assert len(messages) == 1 and "no retry counter or deadline" in messages[0], messages
    # and the by-id stamp is accepted (it was reported as a restamp)
    kept = requeue.replace(
        "first = time.monotonic()",
        "first = self.retries.setdefault(decode_req.req.rid, time.monotonic())",
    )
    assert _pdg007(decode(requeue=kept)) == []


_POLLS = """\
        req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(req_conns)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
"""


def _held(condition: str, admission_only: bool = False, before: str = "") -> dict[str, str]:
    files = decode()
    [(path, text)] = files.items()
    if admission_only:
        held = f"""\
{before}        if {condition}:
            req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(req_conns)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        self.waiting_queue.extend(alloc_reqs)
"""
    else:
        held = f"{before}        if {condition}:\n" + "".join(
            "    " + line for line in _POLLS.splitlines(keepends=True)
        )
    assert _POLLS in text
    return {path: text.replace(_POLLS, held)}


def test_decode_polls_held_under_an_if_are_reported() -> None:
    """No early return, but both polls sit under ``if not <retracted requests>``: the transfer
    queue is not polled while they wait (pdguard saw no gate, and apply said upstream)."""
    messages = _pdg007(_held("not self.disagg_decode_prealloc_queue.retracted_queue"))
    assert len(messages) == 1, messages
    assert "only under `if not self.disagg_decode_prealloc_queue.retracted_queue`" in messages[0]
    assert "pop_transferred()" in messages[0]
    assert "KV is not freed" in messages[0]
    # what such a condition may hold back without a finding: admission only (through a
    # flag), a throttle advanced on every call, the configuration
    flag = "        hold = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0\n"
    throttle = "        self.tick = (self.tick + 1) % 4\n"
    # admission held back through a flag is no finding of its own, but the pending bound it
    # holds back with pop_preallocated() is (simulate's seed 41: with memory full to the
    # end, a request whose room never resolves waits as long as the retracted ones)
    (held,) = _pdg007(_held("not hold", admission_only=True, before=flag))
    assert "bounded only where the polling functions call it behind the retraction gate" in held
    assert _pdg007(_held("self.tick == 0", before=throttle)) == []
    assert _pdg007(_held("self.server_args.decode_polling")) == []
    # the early return is still reported as such, not twice
    gated = decode(gate=RETRACTION_GATE)
    assert [m for m in _pdg007(gated) if "only under" in m] == []


# -- apply on a receiver whose own timeout holds -------------------------------------------


def _hand_timed_nixl(root: Path) -> Path:
    """0.5.4's NIXL receiver with a waiting timeout written by hand (stamped where the
    indices go out, checked before poll()'s last return); its heartbeat still skips rooms no
    chunk reached. Edited by position (the AST), not by copying its text."""
    path = root / "sglang/srt/disaggregation/nixl/conn.py"
    lines = path.read_text().splitlines(keepends=True)
    cls = next(
        n
        for n in ast.parse("".join(lines)).body
        if isinstance(n, ast.ClassDef) and n.name == "NixlKVReceiver"
    )
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    last = methods["poll"].body[-1]
    pad = " " * last.col_offset
    check = (
        f"{pad}if time.monotonic() - self.handed_over_at > 300:\n"
        f"{pad}    self.conclude_state = KVPoll.Failed\n"
        f"{pad}    return KVPoll.Failed\n"
    )
    init_end = methods["init"].body[-1]
    stamp = " " * init_end.col_offset + "self.handed_over_at = time.monotonic()\n"
    lines.insert(last.lineno - 1, check)  # the later position first
    lines.insert(init_end.end_lineno or init_end.lineno, stamp)
    path.write_text("".join(lines))
    return root


@pytest.mark.releases
def test_apply_adds_no_second_timer_where_only_the_heartbeat_is_weak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receiver's own timeout holds; only its manager's heartbeat is weak. The fix used
    to add its init_time timer beside the hand-written one; now it patches the heartbeat."""
    root = _hand_timed_nixl(copy_release("0.5.4", tmp_path / "tree"))
    before = [m for m in _check(root) if "NixlKVReceiver" in m]
    assert len(before) == 1 and "not failed when its prefill is lost" in before[0], before
    assert main(["apply", "--select", "receiver-waiting-timeout", str(root)]) == 0
    out = capsys.readouterr()
    assert "NixlKVManager's heartbeat fails every tracked room" in out.out + out.err
    assert "init_time in init()" not in out.out + out.err
    text = (root / "sglang/srt/disaggregation/nixl/conn.py").read_text()
    assert "self.init_time" not in text
    assert text.count("self.handed_over_at = time.monotonic()") == 1
    assert [m for m in _check(root) if "NixlKVReceiver" in m] == []


def _check(root: Path) -> list[str]:
    files = {
        p.relative_to(root).as_posix(): p.read_text()
        for p in (root / "sglang/srt/disaggregation").rglob("*.py")
    }
    return [f.message for f in run(Project(files), ["PDG006"])]


def test_a_status_from_a_dispatch_table_is_unmodelled_not_unbounded() -> None:
    """``poll()`` hands the status to a handler picked from a table: pdguard cannot follow
    the call, so it says so (PDG000) instead of claiming every state waits forever."""
    body = """\
        now_status = self.kv_mgr.check_status(self.room)
        handler = {KVPoll.WaitingForInput: self._while_waiting}.get(now_status)
        return handler() if handler else self._settle(now_status)
"""
    extra = """\
    def _settle(self, now_status):
        if now_status in (KVPoll.Success, KVPoll.Failed):
            self.settled = now_status
        return now_status

    def _while_waiting(self):
        if self.mark is not None and time.monotonic() - self.mark > LIMIT:
            self.settled = KVPoll.Failed
        return self.settled or KVPoll.WaitingForInput
"""
    text = _RECEIVER.format(stamp=_SENT, body=body, extra=extra)
    project = Project(
        {
            "sglang/srt/disaggregation/base/conn.py": _BASE,
            "sglang/srt/disaggregation/mooncake/conn.py": text,
        }
    )
    found = [(f.code, f.message) for f in run(project, ["PDG000", "PDG006"])]
    assert [code for code, _ in found] == ["PDG000"], found
    assert "`handler()`" in found[0][1]
    assert "cannot follow" in found[0][1]
    # the same receiver without its table: followed, and bounded
    direct = body.replace(
        "        handler = {KVPoll.WaitingForInput: self._while_waiting}.get(now_status)\n", ""
    ).replace(
        "handler() if handler else",
        "self._while_waiting() if now_status == KVPoll.WaitingForInput else",
    )
    text = _RECEIVER.format(stamp=_SENT, body=direct, extra=extra)
    project = Project(
        {
            "sglang/srt/disaggregation/base/conn.py": _BASE,
            "sglang/srt/disaggregation/mooncake/conn.py": text,
        }
    )
    assert run(project, ["PDG000", "PDG006"]) == []


def test_a_deadline_that_drops_without_failing_says_so() -> None:
    """Past its deadline the request is dropped from the pending list with a log line, and
    nothing fails it (the client is never told): reported, and the message says a limit
    exists but fails nothing (it said there was no counter or deadline)."""
    requeue = f"""\
{_I}if time.monotonic() - decode_req.entered_at > TIMEOUT:
{_I}    print("giving up on", decode_req.req.rid)
{_I}    continue
{_I}remaining.append(decode_req)
"""
    messages = _pdg007(decode(requeue=requeue))
    assert len(messages) == 1, messages
    assert "a retry counter or deadline whose limit fails nothing" in messages[0]
    assert "no abort()" in messages[0]


def test_a_gate_that_differs_between_ranks_is_reported_and_not_rewritten() -> None:
    """The retraction gate holds only on one rank: the other ranks enter the polls' all-reduce
    alone. Reported even where it holds back admission only (which is back-pressure on every
    rank alike), with the reason; decode-queue-bound does not carry the rank test over."""
    gate = RETRACTION_GATE.replace("if len(", "if self.tp_rank == 0 and len(")
    messages = _pdg007(decode(gate=gate))
    assert len(messages) == 1, messages
    assert "reads the scheduler's rank" in messages[0]
    assert "those that poll wait for those that do not" in messages[0]
    flag = (
        "        hold = self.attn_tp_rank == 0 and len("
        "self.disagg_decode_prealloc_queue.retracted_queue) > 0\n"
    )
    messages = _pdg007(_held("not hold", admission_only=True, before=flag))
    assert len(messages) == 1 and "reads the scheduler's rank" in messages[0], messages


@pytest.mark.releases
def test_decode_queue_bound_refuses_a_gate_that_differs_between_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.5.4 with its retraction gate made to hold on rank 0 only (edited by position): the
    fix used to rewrite it keeping the rank test, and so kept admission's all-reduce apart
    between ranks, and reported success."""
    root = copy_release("0.5.4", tmp_path / "tree")
    path = root / "sglang/srt/disaggregation/decode.py"
    lines = path.read_text().splitlines(keepends=True)
    func = next(
        n
        for n in ast.walk(ast.parse("".join(lines)))
        if isinstance(n, ast.FunctionDef) and n.name == "process_decode_queue"
    )
    gate = next(
        n
        for n in ast.walk(func)
        if isinstance(n, ast.If) and "retracted_queue" in ast.unparse(n.test)
    )
    line = lines[gate.lineno - 1]
    lines[gate.lineno - 1] = line.replace("if ", "if self.tp_rank == 0 and ", 1)
    path.write_text("".join(lines))
    before = path.read_bytes()
    assert main(["apply", "--select", "decode-queue-bound", str(root)]) == 2
    err = capsys.readouterr().err
    assert "decode-queue-bound refused" in err and "self.tp_rank == 0" in err
    assert path.read_bytes() == before
