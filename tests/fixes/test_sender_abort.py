"""The ``sender-abort`` fix on hand-written sender hierarchies (the test's own names), and how
``inflight-deadline`` depends on it: abort() only, never a poll set on an instance."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pdguard import checks
from pdguard.commands import apply as pipeline
from pdguard.commands.check import load_project
from pdguard.fixes import FIXES
from pdguard.fixes.base import Status
from pdguard.fixes.sender_abort import SenderAbortFix, ignoring_senders
from pdguard.fixes.sender_index import sender_index
from pdguard.tree import open_tree
from pdguard.workspace import Workspace
from tests.snippets import make_tree

DISAGG = "sglang/srt/disaggregation"

# A base with no abort() (as SGLang's BaseKVSender up to 0.5.23).
BASE = """
    class KVPoll:
        Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


    class BaseKVSender:
        def poll(self): ...
"""

# A handle-reading sender with no abort() (as NIXL's up to 0.5.9), a concluding one without
# abort() (as Mooncake's up to 0.4.9.post4) and its subclass (as Ascend's).
RELAY = """
    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class RelayKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr = mgr
            self.room = room
            self.handles = []

        def poll(self):
            if not self.handles:
                return self.kv_mgr.check_status(self.room)
            return KVPoll.Success if self.kv_mgr.finished(self.handles) else KVPoll.Transferring
"""
TIDE = """
    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class TideKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr = mgr
            self.room = room
            self.conclude_state = None

        def poll(self):
            if self.conclude_state is None:
                return self.kv_mgr.check_status(self.room)
            else:
                return self.conclude_state


    class EbbKVSender(TideKVSender):
        pass
"""


def _add(root: Path, **backends: str) -> Path:
    for name, text in backends.items():
        path = root / DISAGG / name / "conn.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_each_sender_is_fixed_in_the_class_that_defines_poll(tmp_path: Path) -> None:
    root = _add(make_tree(tmp_path / "t"), base=BASE, relay=RELAY, tide=TIDE)
    workspace = Workspace(open_tree(root))
    assert ignoring_senders(sender_index(workspace)) == [
        "EbbKVSender",
        "RelayKVSender",
        "TideKVSender",
    ]
    outcome = SenderAbortFix().plan(workspace)
    assert outcome.status is Status.APPLIED, outcome.note
    assert outcome.note == (
        "RelayKVSender: abort(), poll() returns the concluded state first, conclude_state in "
        "__init__; TideKVSender: abort()"
    )
    assert sorted(workspace.changed()) == [f"{DISAGG}/relay/conn.py", f"{DISAGG}/tide/conn.py"]
    assert ignoring_senders(sender_index(workspace)) == []  # Ebb inherits Tide's abort()
    for rel, new in workspace.changed().items():
        (root / rel).write_text(new.text)
    again = Workspace(open_tree(root))
    assert SenderAbortFix().plan(again).status is Status.PRESENT
    assert again.changed() == {}


def test_inflight_deadline_alone_refuses_rather_than_pinning_poll(tmp_path: Path) -> None:
    root = _add(make_tree(tmp_path / "t"), base=BASE, relay=RELAY)
    inflight = next(f for f in FIXES if f.name == "inflight-deadline")
    result = pipeline.plan(open_tree(root), (inflight,))
    refusal = result.outcomes["inflight-deadline"]
    assert refusal.status is Status.REFUSED
    assert refusal.note is not None
    assert refusal.note.startswith("RelayKVSender: poll() does not report Failed once abort()")
    assert "the sender-abort fix changes those classes" in refusal.note
    assert refusal.where == f"{DISAGG}/relay/conn.py"
    assert result.changes == {}


def test_apply_fails_overdue_senders_with_abort_only_and_check_agrees(tmp_path: Path) -> None:
    root = _add(make_tree(tmp_path / "t"), base=BASE, relay=RELAY)
    result = pipeline.plan(open_tree(root))
    assert not result.refused, {n: o.note for n, o in result.refused.items()}
    assert result.outcomes["sender-abort"].status is Status.APPLIED
    assert result.outcomes["inflight-deadline"].status is Status.APPLIED
    pipeline.write(result)
    prefill = (root / DISAGG / "prefill.py").read_text()
    assert "sender.abort()" in prefill and ".poll =" not in prefill
    assert checks.run(load_project(open_tree(root))) == []
    # without the sender change, check says which sender the deadline cannot fail
    relay = root / DISAGG / "relay" / "conn.py"
    relay.write_text(textwrap.dedent(RELAY))
    findings = checks.run(load_project(open_tree(root)), ["PDG008"])
    assert [(f.path, f.line, f.symbol) for f in findings] == [
        (f"{DISAGG}/relay/conn.py", 11, "RelayKVSender.poll")
    ]
    assert "(it has no abort())" in findings[0].message


# A sender that honours abort() and whose manager keeps failure records (abort() writes one),
# but whose failure_exception() reads none (as NIXL's 0.5.12); with the manager's
# record_failure() a stub instead (as NIXL's up to 0.5.9) there is no record to read.
KEEPER = """
    import threading

    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class KeeperKVManager:
        def __init__(self):
            self.failure_lock = threading.Lock()
            self.failure_records = {}  # room -> why it failed

        def record_failure(self, room, why):
            with self.failure_lock:
                self.failure_records[room] = why


    class KeeperKVSender(BaseKVSender):
        def __init__(self, mgr: KeeperKVManager, bootstrap_room):
            self.conclude_state = None
            self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room

        def poll(self):
            if self.conclude_state is not None:
                return self.conclude_state
            room = self.bootstrap_room
            return self.kv_mgr.check_status(room)

        def abort(self):
            self.conclude_state = KVPoll.Failed
            self.kv_mgr.record_failure(self.bootstrap_room, "aborted by the scheduler")

        def failure_exception(self):
            raise RuntimeError("keeper sender failed")
"""
KEEPER_STUB = KEEPER.replace(
    """            with self.failure_lock:
                self.failure_records[room] = why
""",
    "            pass\n",
)
assert KEEPER_STUB != KEEPER


def test_a_sender_that_reads_no_record_its_manager_keeps_gets_the_read(tmp_path: Path) -> None:
    root = _add(make_tree(tmp_path / "t"), base=BASE, keeper=KEEPER)
    result = pipeline.plan(open_tree(root))
    assert not result.refused, {n: o.note for n, o in result.refused.items()}
    abort = result.outcomes["sender-abort"]
    assert abort.status is Status.APPLIED
    assert abort.note == "KeeperKVSender: failure_exception() raises the room's failure record"
    pipeline.write(result)
    keeper = (root / DISAGG / "keeper" / "conn.py").read_text()
    assert "failure_reason = self.kv_mgr.failure_records.pop(self.bootstrap_room, None)" in keeper
    # every sender now pops its record: the deadline adds its own, not only replaces abort()'s
    prefill = (root / DISAGG / "prefill.py").read_text()
    assert 'if hasattr(kv_mgr, "record_failure"):' in prefill
    assert '"failure_records"' not in prefill
    assert checks.run(load_project(open_tree(root))) == []
    again = Workspace(open_tree(root))
    assert SenderAbortFix().plan(again).status is Status.PRESENT
    assert again.changed() == {}


def test_a_manager_with_a_stub_record_failure_leaves_failure_exception_alone(
    tmp_path: Path,
) -> None:
    root = _add(make_tree(tmp_path / "t"), base=BASE, keeper=KEEPER_STUB)
    workspace = Workspace(open_tree(root))
    assert SenderAbortFix().plan(workspace).status is Status.UPSTREAM
    assert workspace.changed() == {}


# An aborting sender whose poll() returns the room's status while nothing is concluded, and
# the concluded state after that ``if`` (no ``else``); and one whose unconcluded branch falls
# through to the handles, so an abort() is never seen.
EARLY_RETURN = """
    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class SluiceKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr, self.room = mgr, room
            self.conclude_state = None

        def poll(self):
            if self.conclude_state is None:
                return self.kv_mgr.check_status(self.room)
            return self.conclude_state

        def abort(self):
            self.kv_mgr.forget(self.room)
            self.conclude_state = KVPoll.Failed


    class WeirKVSender(SluiceKVSender):
        def poll(self):
            if self.conclude_state is None:
                self.kv_mgr.refresh(self.room)
            return self.kv_mgr.check_status(self.room)
"""


def test_concluded_state_returned_after_an_early_return_is_honoured(tmp_path: Path) -> None:
    """``if conclude_state is None: return <status>`` then ``return conclude_state`` reports
    Failed once aborted, as the ``else:`` spelling does; a branch that falls through does not."""
    root = _add(make_tree(tmp_path / "t"), base=BASE, sluice=EARLY_RETURN)
    index = sender_index(Workspace(open_tree(root)))
    assert index.abort_honoured("SluiceKVSender")
    assert not index.abort_honoured("WeirKVSender")
    assert ignoring_senders(index) == ["WeirKVSender"]
