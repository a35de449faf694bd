"""KV sender verdicts (PDG004, PDG008, the sender fixes) on hand-written senders in styles
pdguard had not met: a timeout test that only logs or raises, a clock started at the first
poll or restarted on every poll, a state held in a table or an attribute, an abort() that
marks the sender in an attribute of its own. Every snippet is pdguard's own (a fork backend,
``quill``); only SGLang's API names (``KVPoll``, ``init_time``, ``check_status``, ...) are
the release's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pdguard.checks import Project, run
from pdguard.checks.examples import PATCHED
from pdguard.checks.rule import PREFILL
from pdguard.fixes.base import Status
from pdguard.fixes.sender_bootstrap_timeout import SenderBootstrapTimeoutFix
from pdguard.tree import open_tree
from pdguard.workspace import Workspace

_BASE_PATH = "sglang/srt/disaggregation/base/conn.py"
_QUILL_PATH = "sglang/srt/disaggregation/quill/conn.py"

_BASE = """\
class KVPoll:
    Success = 4
    Bootstrapping = 1
    Failed = 0
    WaitingForInput = 2


class BaseKVSender:
    def poll(self): ...
"""

# A fork sender: the ledger reports Bootstrapping until decode answers; {stamp} starts its
# clock in __init__, {helpers} are extra methods, {poll} is poll()'s body.
_QUILL = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll

PATIENCE_S = 90


class QuillKVSender(BaseKVSender):
    def __init__(self, ledger, room):
        self.kv_mgr = ledger
        self.room = room
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.conclude_state = None
{stamp}
{helpers}
    def poll(self):
{poll}
"""

_STAMP = "        self.init_time = time.monotonic()\n"


def _sender(poll: str, stamp: str = _STAMP, helpers: str = "") -> str:
    return _QUILL.format(
        stamp=stamp.rstrip("\n"),
        helpers=textwrap.indent(textwrap.dedent(helpers), "    "),
        poll=textwrap.indent(textwrap.dedent(poll), "        ").rstrip("\n"),
    )


def _found(sender: str, code: str, prefill: str | None = None) -> list[str]:
    files = {_BASE_PATH: _BASE, _QUILL_PATH: sender}
    if prefill is not None:
        files[PREFILL] = prefill
    return [f.message for f in run(Project(files), [code])]


# -- PDG004: a test of the elapsed time must report Failed when it expires ---------------


def test_a_timeout_test_that_only_logs_is_no_timeout() -> None:
    sender = _sender(
        """\
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping and time.monotonic() - self.init_time > PATIENCE_S:
            print("room still bootstrapping", self.room)
        return state
        """
    )
    [message] = _found(sender, "PDG004")
    assert "QuillKVSender can stay in Bootstrapping forever" in message
    assert "test of the time since init_time (line 18) reports no Failed" in message
    assert "raises" not in message


def test_a_timeout_that_raises_out_of_poll_is_reported_as_such() -> None:
    sender = _sender(
        """\
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping:
            waited = time.monotonic() - self.init_time
            if waited > PATIENCE_S:
                raise TimeoutError(f"room {self.room}: no decode after {waited:.0f}s")
        return state
        """
    )
    [message] = _found(sender, "PDG004")
    assert "reports no Failed when the timeout expires: it raises" in message
    assert "stops the scheduler's poll loop" in message


@pytest.mark.parametrize(
    ("helpers", "poll"),
    [
        # the limit tested in a predicate helper, Failed decided in poll()
        (
            """\
            def _overdue(self):
                return time.monotonic() - self.init_time >= PATIENCE_S
            """,
            """\
            state = self.kv_mgr.check_status(self.room)
            if state == KVPoll.Bootstrapping and self._overdue():
                print("giving up on", self.room)
            return state
            """,
        ),
        # the limit in a case guard whose branch only logs
        (
            "",
            """\
            match self.kv_mgr.check_status(self.room):
                case KVPoll.Bootstrapping if time.monotonic() - self.init_time > PATIENCE_S:
                    print("late", self.room)
                    return KVPoll.Bootstrapping
                case other:
                    return other
            """,
        ),
    ],
)
def test_an_inert_timeout_test_in_other_styles_is_reported(helpers: str, poll: str) -> None:
    [message] = _found(_sender(poll, helpers=helpers), "PDG004")
    assert "reports no Failed when the timeout expires" in message


@pytest.mark.parametrize(
    "poll",
    [
        # the clock starts at the first poll(): every later Bootstrapping is timed
        """\
        if self.init_time is None:
            self.init_time = time.perf_counter()
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping:
            if time.perf_counter() - self.init_time > PATIENCE_S:
                self.conclude_state = KVPoll.Failed
        return self.conclude_state or state
        """,
        """\
        if not self.init_time:
            self.init_time = time.perf_counter()
        state = self.kv_mgr.check_status(self.room)
        late = time.perf_counter() - self.init_time > PATIENCE_S
        return KVPoll.Failed if late and state == KVPoll.Bootstrapping else state
        """,
    ],
)
def test_a_clock_started_at_the_first_poll_is_a_timeout(poll: str) -> None:
    sender = _sender(poll, stamp="        self.init_time = None\n")
    assert _found(sender, "PDG004") == []


# A poll() that starts its clock again on every call: its timeout never fires.
_RESTARTED_EVERY_POLL = """\
        self.init_time = time.monotonic()
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping and time.monotonic() - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        return state
        """


def test_a_clock_restarted_on_every_poll_never_expires() -> None:
    sender = _sender(_RESTARTED_EVERY_POLL)
    [message] = _found(sender, "PDG004")
    assert "poll() restarts init_time on every call (line 17)" in message
    assert "never grows" in message


def test_the_fix_refuses_a_clock_restarted_on_every_poll(tmp_path: Path) -> None:
    sender = _sender(_RESTARTED_EVERY_POLL)
    disagg = tmp_path / "sglang" / "srt" / "disaggregation"
    for rel, text in {_BASE_PATH: _BASE, _QUILL_PATH: sender, PREFILL: ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert disagg.is_dir()
    workspace = Workspace(open_tree(tmp_path))
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.REFUSED, outcome.note
    assert "restarts init_time on every call" in outcome.note
    assert outcome.where == f"{_QUILL_PATH}:17"
    assert workspace.changed() == {}


@pytest.mark.parametrize(
    ("module", "stamp", "poll"),
    [
        # a table of states, looked up by phase
        (
            "_BY_PHASE = {0: KVPoll.Bootstrapping, 1: KVPoll.WaitingForInput}\n",
            "        self.phase = 0\n",
            "return _BY_PHASE[self.phase]\n",
        ),
        # a state kept in an attribute that starts as Bootstrapping
        ("", "        self._phase = KVPoll.Bootstrapping\n", "return self._phase\n"),
    ],
)
def test_a_held_bootstrapping_state_is_a_bootstrapping_sender(
    module: str, stamp: str, poll: str
) -> None:
    sender = (
        _sender(poll, stamp=stamp)
        .replace("PATIENCE_S = 90\n", "PATIENCE_S = 90\n" + module)
        .replace("        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)\n", "")
    )
    [message] = _found(sender, "PDG004")
    assert "QuillKVSender can stay in Bootstrapping forever" in message
    assert "init_time is never set" in message


# -- PDG008: abort() that marks the sender in an attribute poll() tests first --------------


def _aborting(abort: str, first: str) -> str:
    rest = """\
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping and time.monotonic() - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        return state
        """
    helpers = "def abort(self):\n    " + abort + "\n"
    return _sender(first + textwrap.dedent(rest), helpers=helpers)


# (abort(), poll()'s first statement) honoured, and a twin that differs only where it matters
_PAIRS = [
    (
        ("self.cancelled = True", "if self.cancelled:\n    return KVPoll.Failed\n"),
        ("self.cancelled = True", "if not self.cancelled:\n    return KVPoll.Failed\n"),
    ),
    (
        (
            "self._state = KVPoll.Failed",
            "if self._state == KVPoll.Failed:\n    return self._state\n",
        ),
        # KVPoll.Failed is 0: a truthiness test of it never holds
        ("self._state = KVPoll.Failed", "if self._state:\n    return KVPoll.Failed\n"),
    ),
    (
        (
            "self.conclude_state = KVPoll.Failed",
            "if self.conclude_state in (KVPoll.Failed,):\n    return KVPoll.Failed\n",
        ),
        (
            "self.conclude_state = KVPoll.Failed",
            "if self.conclude_state in (KVPoll.Failed,):\n    return KVPoll.Success\n",
        ),
    ),
    (
        ("self.reason = 'aborted'", "if self.reason is not None:\n    return KVPoll.Failed\n"),
        ("self.reason = None", "if self.reason is not None:\n    return KVPoll.Failed\n"),
    ),
]


_MATCH_MARK = "match self.cancelled:\n    case {case}:\n        return KVPoll.Failed\n"
_MATCH_CONCLUDED = (
    "match self.conclude_state:\n    case None:\n        pass\n"
    "    case concluded:\n        return {returned}\n"
)
_PAIRS += [
    (
        ("self.cancelled = True", _MATCH_MARK.format(case="True")),
        ("self.cancelled = True", _MATCH_MARK.format(case="False")),
    ),
    (
        ("self.cancelled = True", _MATCH_MARK.format(case="_")),
        # a guard pdguard cannot decide: not proved
        ("self.cancelled = True", _MATCH_MARK.format(case="_ if self.room")),
    ),
    (
        ("self.conclude_state = KVPoll.Failed", _MATCH_CONCLUDED.format(returned="concluded")),
        (
            "self.conclude_state = KVPoll.Failed",
            _MATCH_CONCLUDED.format(returned="KVPoll.Transferring"),
        ),
    ),
]


@pytest.mark.parametrize(("honoured", "ignored"), _PAIRS)
def test_an_abort_mark_counts_only_if_poll_fails_on_it_first(
    honoured: tuple[str, str], ignored: tuple[str, str]
) -> None:
    assert _found(_aborting(*honoured), "PDG008", prefill=PATCHED) == []
    [message] = _found(_aborting(*ignored), "PDG008", prefill=PATCHED)
    assert "QuillKVSender.poll() does not report Failed once abort() has run" in message
    mark = ignored[0].split(" =")[0]
    if mark != "self.conclude_state":  # a mark, not a concluded state: the message names it
        assert f"does not return Failed once QuillKVSender.abort() has set {mark}" in message


# -- PDG004: the timeout must be tested on every path that can report Bootstrapping --------


_SENT_FLAG = "        self.sent = False\n"


def test_a_timeout_tested_only_after_the_status_was_returned_is_reported() -> None:
    # the room's status is returned while nothing is sent: the test below never sees it
    sender = _sender(
        """\
        if not self.sent:
            return self.kv_mgr.check_status(self.room)
        if time.monotonic() - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        return KVPoll.Transferring
        """,
        stamp=_STAMP + _SENT_FLAG,
    )
    [message] = _found(sender, "PDG004")
    assert "poll() can return the room's status (line 19) before the bootstrap timeout is " in (
        message
    )
    assert "tested (line 20)" in message


@pytest.mark.parametrize(
    "guard",
    [
        "if state != KVPoll.Bootstrapping:",
        "if state in (KVPoll.Success, KVPoll.Failed):",
        "if state == KVPoll.WaitingForInput:",
    ],
)
def test_a_status_returned_early_only_when_not_bootstrapping_is_fine(guard: str) -> None:
    sender = _sender(
        f"""\
        state = self.kv_mgr.check_status(self.room)
        {guard}
            return state
        if time.monotonic() - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        if self.sent:
            return state
        return self.kv_mgr.check_status(self.room)
        """,
        stamp=_STAMP + _SENT_FLAG,
    )
    assert _found(sender, "PDG004") == []
    # the same early return without its guard is a path that skips the test
    unguarded = sender.replace(f"        {guard}\n    ", "")
    [message] = _found(unguarded, "PDG004")
    assert "reports Bootstrapping unchecked" in message


# -- PDG004: a clock of the sender's own, read at construction ------------------------------


_GIVE_UP = "        self.give_up_at = time.monotonic() + PATIENCE_S\n"


@pytest.mark.parametrize(
    ("stamp", "poll", "expected"),
    [
        # a deadline set at construction, failed on once passed: bounded
        (
            _GIVE_UP,
            """\
            state = self.kv_mgr.check_status(self.room)
            if state == KVPoll.Bootstrapping and time.monotonic() > self.give_up_at:
                self.conclude_state = KVPoll.Failed
            return self.conclude_state or state
            """,
            None,
        ),
        # the same deadline pushed back on every poll: never passed
        (
            _GIVE_UP,
            """\
            self.give_up_at = time.monotonic() + PATIENCE_S
            state = self.kv_mgr.check_status(self.room)
            if state == KVPoll.Bootstrapping and time.monotonic() > self.give_up_at:
                return KVPoll.Failed
            return state
            """,
            "restarts init_time on every call (line 17)",
        ),
        # a deadline that only logs
        (
            _GIVE_UP,
            """\
            state = self.kv_mgr.check_status(self.room)
            if state == KVPoll.Bootstrapping and time.monotonic() > self.give_up_at:
                print("late", self.room)
            return state
            """,
            "test of the time since init_time (line 18) reports no Failed",
        ),
    ],
)
def test_a_deadline_of_the_senders_own_is_a_timeout_by_what_it_does(
    stamp: str, poll: str, expected: str | None
) -> None:
    found = _found(_sender(poll, stamp=stamp), "PDG004")
    if expected is None:
        assert found == []
    else:
        [message] = found
        assert expected in message


# -- PDG000: a poll() pdguard cannot read is said to be unread, never passed --------------


_OPAQUE = """\
from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class QuillKVSender(BaseKVSender):
    def __init__(self, ledger, room, machine):
        self.kv_mgr = ledger
        self.room = room
        self.conclude_state = None
        self.machine = machine

    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        return {returned}
"""


# read: a KVPoll member, a table of them (none is Bootstrapping): nothing to report
_READ = ("KVPoll.WaitingForInput", "{True: KVPoll.Success, False: KVPoll.WaitingForInput}[self.ok]")


@pytest.mark.parametrize("returned", ["self.machine.current(self.room)", "self.machine.state"])
def test_a_poll_pdguard_cannot_read_is_pdg000_not_a_pass(returned: str) -> None:
    files = {_BASE_PATH: _BASE, _QUILL_PATH: _OPAQUE.format(returned=returned)}
    [finding] = run(Project(files), ["PDG000", "PDG004"])
    assert (finding.code, finding.line) == ("PDG000", 14)
    assert f"QuillKVSender.poll() returns `{returned}`" in finding.message
    assert "cannot tell whether this sender can report Bootstrapping" in finding.message
    for read in _READ:
        files[_QUILL_PATH] = _OPAQUE.format(returned=read)
        assert run(Project(files), ["PDG000", "PDG004"]) == [], read


def test_the_fix_refuses_a_sender_it_cannot_read(tmp_path: Path) -> None:
    sender = _OPAQUE.format(returned="self.machine.current(self.room)")
    for rel, text in {_BASE_PATH: _BASE, _QUILL_PATH: sender, PREFILL: ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    workspace = Workspace(open_tree(tmp_path))
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.REFUSED, outcome.note
    assert "cannot tell whether QuillKVSender can report Bootstrapping" in outcome.note
    assert outcome.where == f"{_QUILL_PATH}:14"


# -- the fix: a manager handed on to the base's __init__ is the base's manager -------------


_COMMON_PATH = "sglang/srt/disaggregation/common/conn.py"
_COMMON = """\
import os

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class LedgerManager:
    def __init__(self):
        self.statuses = {}
        self.boot_limit = int(os.environ.get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "60"))

    def check_status(self, room):
        return self.statuses[room]

    def update_status(self, room, state):
        self.statuses[room] = state


class SharedSender(BaseKVSender):
    def __init__(self, mgr: LedgerManager, room: int):
        self.kv_mgr = mgr
        self.room = room
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
"""
_FORK = """\
import time

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.common.conn import SharedSender


class QuillKVSender(SharedSender):
    def __init__(self, ledger, room):
        super().__init__(ledger, room)
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        return status
"""


def test_the_fix_reads_the_timeout_of_a_manager_handed_on_to_the_base(tmp_path: Path) -> None:
    files = {_BASE_PATH: _BASE, _COMMON_PATH: _COMMON, _QUILL_PATH: _FORK, PREFILL: ""}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    workspace = Workspace(open_tree(tmp_path))
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.APPLIED, outcome.note
    fixed = workspace.changed()[_QUILL_PATH].text
    assert "elapsed >= self.kv_mgr.boot_limit" in fixed
    # not handed on (the base gets another object): pdguard cannot tell the manager
    other = _FORK.replace("super().__init__(ledger, room)", "super().__init__(None, room)")
    (tmp_path / _QUILL_PATH).write_text(other)
    outcome = SenderBootstrapTimeoutFix().plan(Workspace(open_tree(tmp_path)))
    assert outcome.status is Status.REFUSED
    assert "pdguard cannot tell QuillKVSender's manager" in outcome.note


# -- PDG004: a clock under the sender's own name ---------------------------------------------


@pytest.mark.parametrize(
    ("imports", "helpers", "clock"),
    [
        ("from time import perf_counter as tick\n", "", "tick()"),
        ("", "@staticmethod\ndef _now():\n    return time.monotonic()\n", "self._now()"),
    ],
)
def test_a_clock_under_the_senders_own_name_is_a_clock(
    imports: str, helpers: str, clock: str
) -> None:
    poll = f"""\
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.Bootstrapping and {clock} - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        return state
        """
    stamp = f"        self.init_time = {clock}\n"
    sender = imports + _sender(poll, stamp=stamp, helpers=helpers)
    assert _found(sender, "PDG004") == []
    # a helper that returns something else is no clock
    if helpers:
        other = sender.replace("return time.monotonic()", "return 7")
        [message] = _found(other, "PDG004")
        assert "never compares the time since init_time" in message


# -- a poll bound in the class body -----------------------------------------------------------


_BOUND = """\
from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class QuillKVSender(BaseKVSender):
    def __init__(self, ledger, room):
        self.kv_mgr = ledger
        self.room = room
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

    def _drive(self):
        return self.kv_mgr.check_status(self.room)

    poll = {bound}
"""


def test_a_poll_bound_to_a_method_is_that_method() -> None:
    files = {_BASE_PATH: _BASE, _QUILL_PATH: _BOUND.format(bound="_drive")}
    [finding] = run(Project(files), ["PDG000", "PDG004"])
    assert (finding.code, finding.line) == ("PDG004", 10)
    assert "QuillKVSender can stay in Bootstrapping forever" in finding.message


def test_a_poll_bound_to_an_expression_is_pdg000_and_the_fix_refuses(tmp_path: Path) -> None:
    sender = _BOUND.format(bound="staticmethod(lambda: None)")
    files = {_BASE_PATH: _BASE, _QUILL_PATH: sender}
    [finding] = run(Project(files), ["PDG000", "PDG004"])
    assert (finding.code, finding.line) == ("PDG000", 13)
    assert "QuillKVSender.poll is bound to an expression, not defined" in finding.message
    for rel, text in {**files, PREFILL: ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    outcome = SenderBootstrapTimeoutFix().plan(Workspace(open_tree(tmp_path)))
    assert outcome.status is Status.REFUSED, outcome.note
    assert "pdguard cannot read QuillKVSender's poll()" in outcome.note


# -- PDG004: a timeout tested only in another state never fires while Bootstrapping ---------


@pytest.mark.parametrize(
    ("helpers", "poll", "expected"),
    [
        (
            "",
            """\
            state = self.kv_mgr.check_status(self.room)
            if state == KVPoll.Transferring and time.monotonic() - self.init_time > PATIENCE_S:
                return KVPoll.Failed
            return state
            """,
            "poll() tests the time since init_time (line 18) only in another state than "
            "Bootstrapping",
        ),
        (
            "",
            """\
            match self.kv_mgr.check_status(self.room):
                case KVPoll.Transferring if time.monotonic() - self.init_time > PATIENCE_S:
                    return KVPoll.Failed
                case other:
                    return other
            """,
            "poll() tests the time since init_time (line 18) only in another state than "
            "Bootstrapping",
        ),
        (
            """\
            def _expire(self):
                if time.monotonic() - self.init_time > PATIENCE_S:
                    self.conclude_state = KVPoll.Failed
            """,
            """\
            state = self.kv_mgr.check_status(self.room)
            if state != KVPoll.Bootstrapping:
                self._expire()
            return self.conclude_state or state
            """,
            "return the room's status (line 23) while the bootstrap timeout is tested only in "
            "other states",
        ),
    ],
)
def test_a_timeout_tested_only_in_another_state_is_reported(
    helpers: str, poll: str, expected: str
) -> None:
    [message] = _found(_sender(poll, helpers=helpers), "PDG004")
    assert expected in message
    # the same test in the Bootstrapping state is a timeout
    fixed = _sender(poll, helpers=helpers).replace("Transferring", "Bootstrapping")
    fixed = fixed.replace("state != KVPoll.Bootstrapping", "state == KVPoll.Bootstrapping")
    assert _found(fixed, "PDG004") == []


def test_a_first_poll_clock_behind_another_test_does_not_start() -> None:
    sender = _sender(
        """\
        state = self.kv_mgr.check_status(self.room)
        if state == KVPoll.WaitingForInput:
            if self.init_time is None:
                self.init_time = time.monotonic()
        if self.init_time is not None and time.monotonic() - self.init_time > PATIENCE_S:
            return KVPoll.Failed
        return state
        """,
        stamp="        self.init_time = None\n",
    )
    [message] = _found(sender, "PDG004")
    assert "init_time is None while Bootstrapping" in message
    # behind the test that it is Bootstrapping: it starts on the first poll that sees it
    assert _found(sender.replace("WaitingForInput:", "Bootstrapping:"), "PDG004") == []
    started = sender.replace("        if state == KVPoll.WaitingForInput:\n", "").replace(
        "            if self.init_time is None:\n                self.init_time",
        "        if self.init_time is None:\n            self.init_time",
    )
    assert _found(started, "PDG004") == []


def test_the_fix_adds_a_check_where_a_return_came_before_the_old_one(tmp_path: Path) -> None:
    fork = _FORK.replace(
        """\
    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        return status
""",
        """\
    def poll(self):
        if not self.sent:
            return self.kv_mgr.check_status(self.room)
        if time.time() - self.init_time > 30:
            return KVPoll.Failed
        return KVPoll.Transferring
""",
    ).replace(
        "        self.init_time = time.time()\n",
        "        self.init_time = time.time()\n        self.sent = False\n",
    )
    files = {_BASE_PATH: _BASE, _COMMON_PATH: _COMMON, _QUILL_PATH: fork, PREFILL: ""}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    [before] = run(Project(files), ["PDG004"])
    assert "reports Bootstrapping unchecked" in before.message
    workspace = Workspace(open_tree(tmp_path))
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.APPLIED, outcome.note
    fixed = {**files, _QUILL_PATH: workspace.changed()[_QUILL_PATH].text}
    assert run(Project(fixed), ["PDG004"]) == []


def test_a_decorated_poll_is_pdg000_not_a_verdict_on_its_body() -> None:
    wrapped = _sender(
        """\
        return self.kv_mgr.check_status(self.room)
        """
    ).replace("    def poll(self):", "    @count_calls\n    def poll(self):")
    files = {_BASE_PATH: _BASE, _QUILL_PATH: wrapped}
    [finding] = run(Project(files), ["PDG000", "PDG004"])
    assert (finding.code, finding.line) == ("PDG000", 16)
    assert "QuillKVSender.poll is wrapped by @count_calls" in finding.message
    # @abstractmethod changes nothing: the body's verdict stands
    files[_QUILL_PATH] = wrapped.replace("@count_calls", "@abc.abstractmethod")
    [finding] = run(Project(files), ["PDG000", "PDG004"])
    assert finding.code == "PDG004"


# -- a poll() inherited from a mixin in a file that names no sender ------------------------

_MIXIN_PATH = "sglang/srt/disaggregation/common/polling.py"
# The fork moved poll() into a mixin of its own file: no "KVSender" in it, so the text
# prefilter alone would leave it out, and the sender would be judged by BaseKVSender.poll.
_QUILL_ON_MIXIN = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll
from sglang.srt.disaggregation.common.polling import LedgerPolling


class QuillKVSender(LedgerPolling, BaseKVSender):
    def __init__(self, ledger, room):
        self.kv_mgr = ledger
        self.room = room
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.init_time = time.monotonic()
"""
_MIXIN = """\
import time

from sglang.srt.disaggregation.base.conn import KVPoll


class LedgerPolling:
    def poll(self):
        state = self.kv_mgr.check_status(self.room)
{timeout}        return state
"""
_MIXIN_TIMEOUT = """\
        if state == KVPoll.Bootstrapping and time.monotonic() - self.init_time > 90:
            return KVPoll.Failed
"""


@pytest.mark.parametrize("bounded", [False, True])
def test_a_poll_inherited_from_a_mixin_in_a_file_no_needle_names_is_followed(
    tmp_path: Path, bounded: bool
) -> None:
    from pdguard.commands.check import load_project

    files = {
        _BASE_PATH: _BASE,
        _QUILL_PATH: _QUILL_ON_MIXIN,
        _MIXIN_PATH: _MIXIN.format(timeout=_MIXIN_TIMEOUT if bounded else ""),
        PREFILL: PATCHED,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    project = load_project(open_tree(tmp_path))
    assert _MIXIN_PATH in project.texts  # read, though it names no sender
    messages = [f.message for f in run(project, ["PDG004"])]
    if bounded:
        assert messages == []
    else:
        [message] = messages
        assert "QuillKVSender can stay in Bootstrapping forever" in message


def test_a_base_the_tree_does_not_define_is_unmodelled_not_passed() -> None:
    """The same sender, its mixin imported from another package: what runs as poll() is not
    in the tree, so nothing can prove the sender bounded (PDG000, not silence)."""
    sender = _QUILL_ON_MIXIN.replace("sglang.srt.disaggregation.common.polling", "lab.transport")
    findings = run(Project({_BASE_PATH: _BASE, _QUILL_PATH: sender}), ["PDG000", "PDG004"])
    [finding] = findings
    assert finding.code == "PDG000" and finding.path == _QUILL_PATH
    assert "has the base LedgerPolling, which the tree does not define" in finding.message
