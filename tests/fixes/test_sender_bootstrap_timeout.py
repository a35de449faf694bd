"""The ``sender-bootstrap-timeout`` fix on hand-written sender hierarchies (several files,
inheritance, helpers; the shared ones in tests/snippets.py), and its statuses."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pdguard.fixes.base import Status
from pdguard.fixes.sender_bootstrap_timeout import SenderBootstrapTimeoutFix
from pdguard.fixes.sender_index import sender_index
from pdguard.tree import open_tree
from pdguard.workspace import Workspace
from tests.snippets import (
    NIXL_BROKEN,
    NIXL_NEVER_BOOTSTRAPS,
    NIXL_VIA_HELPER,
    SENDER_BASE,
    SENDER_COMMON,
)


def _tree(tmp_path: Path, **files: str) -> Workspace:
    disagg = tmp_path / "sglang" / "srt" / "disaggregation"
    (disagg / "base").mkdir(parents=True)
    (disagg / "prefill.py").write_text("")
    (disagg / "base" / "conn.py").write_text(textwrap.dedent(SENDER_BASE))
    for name, text in files.items():
        path = disagg / name / "conn.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return Workspace(open_tree(tmp_path))


def test_broken_sender_is_fixed_in_its_own_class(tmp_path: Path) -> None:
    workspace = _tree(tmp_path, common=SENDER_COMMON, nixl=NIXL_BROKEN)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.APPLIED, outcome.note
    assert outcome.note.startswith("NixlKVSender: init_time + check (helper)")
    assert list(workspace.changed()) == ["sglang/srt/disaggregation/nixl/conn.py"]
    facts = sender_index(workspace).facts("NixlKVSender")
    assert (facts.init_time, facts.check_reached) == ("time", True)
    # Written back and planned again: pdguard's marker -> present, nothing to do.
    for rel, new in workspace.changed().items():
        (tmp_path / rel).write_text(new.text)
    again = _tree_again(tmp_path)
    assert SenderBootstrapTimeoutFix().plan(again).status is Status.PRESENT
    assert again.changed() == {}


def _tree_again(tmp_path: Path) -> Workspace:
    return Workspace(open_tree(tmp_path))


def test_check_through_a_helper_method_is_upstream(tmp_path: Path) -> None:
    workspace = _tree(tmp_path, common=SENDER_COMMON, nixl=NIXL_VIA_HELPER)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.UPSTREAM, outcome.note
    assert workspace.changed() == {}


def test_inherited_everything_is_upstream(tmp_path: Path) -> None:
    # As in 0.5.23: `class NixlKVSender(CommonKVSender): pass`, Common does it all.
    common = SENDER_COMMON.replace("self.init_time = None", "self.init_time = time.time()") + (
        "\n        def poll(self):\n"
        "            status = self.kv_mgr.check_status(self.bootstrap_room)\n"
        "            if status == KVPoll.Bootstrapping:\n"
        "                return self._check_bootstrap_timeout() or status\n"
        "            return status\n"
    )
    nixl = """
        from sglang.srt.disaggregation.common.conn import CommonKVSender


        class NixlKVSender(CommonKVSender):
            pass
    """
    workspace = _tree(tmp_path, common=common, nixl=nixl)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.UPSTREAM, outcome.note
    assert "NixlKVSender" in outcome.note


def test_sender_that_never_bootstraps_is_not_applicable(tmp_path: Path) -> None:
    workspace = _tree(tmp_path, nixl=NIXL_NEVER_BOOTSTRAPS)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.NOT_APPLICABLE
    assert "no KV sender can report Bootstrapping" in outcome.note


def test_init_time_set_only_in_init_is_fixed(tmp_path: Path) -> None:
    # Mooncake 0.4.7 - 0.4.8: an inline check exists, but init_time is None while
    # Bootstrapping because init() runs only after it.
    mooncake = """
        import time

        from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


        class MooncakeKVManager:
            def __init__(self):
                self.bootstrap_time_out = 30


        class MooncakeKVSender(BaseKVSender):
            def __init__(self, mgr: MooncakeKVManager, room):
                self.kv_mgr, self.bootstrap_room = mgr, room
                mgr.update_status(room, KVPoll.Bootstrapping)
                self.init_time = None

            def init(self):
                self.init_time = time.time()

            def poll(self):
                state = self.kv_mgr.check_status(self.bootstrap_room)
                waited = None if self.init_time is None else time.time() - self.init_time
                if state == KVPoll.Bootstrapping and waited is not None:
                    if waited >= self.kv_mgr.bootstrap_time_out:
                        return KVPoll.Failed
                return state
    """
    workspace = _tree(tmp_path, mooncake=mooncake)
    facts = sender_index(workspace).facts("MooncakeKVSender")
    assert (facts.can_bootstrap, facts.init_time, facts.check_reached) == (True, "none", True)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.note == "MooncakeKVSender: init_time", outcome.note
    text = workspace.text("sglang/srt/disaggregation/mooncake/conn.py")
    assert "self.init_time = None" not in text
    assert sender_index(workspace).facts("MooncakeKVSender").init_time == "time"


def test_inline_check_uses_the_managers_timeout_attribute(tmp_path: Path) -> None:
    # the base without its helper (renamed, so nothing reaches it): the check must be inline
    common = SENDER_COMMON.replace("def _check_bootstrap_timeout(", "def _unreached_helper(")
    assert common != SENDER_COMMON
    workspace = _tree(tmp_path, common=common, nixl=NIXL_BROKEN)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.APPLIED
    assert "(inline)" in outcome.note
    text = workspace.text("sglang/srt/disaggregation/nixl/conn.py")
    assert "if elapsed >= self.kv_mgr.bootstrap_timeout:" in text
    assert "self.kv_mgr.record_failure(" in text


def test_unanchorable_poll_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    nixl = NIXL_BROKEN.replace(
        "status = self.kv_mgr.check_status(self.bootstrap_room)\n            return status",
        # two reads of the status: which one is the status the check guards?
        "first = self.kv_mgr.check_status(1)\n"
        "            second = self.kv_mgr.check_status(2)\n"
        "            return first or second",
    )
    workspace = _tree(tmp_path, common=SENDER_COMMON, nixl=nixl)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.REFUSED
    assert "check_status" in outcome.note
    assert workspace.changed() == {}


def test_status_read_behind_an_or_is_anchored(tmp_path: Path) -> None:
    """A fork's poll() that reads the status as ``self.conclude_state or check_status(...)``:
    the whole expression is the status, and the check goes right after it."""
    nixl = NIXL_BROKEN.replace(
        "status = self.kv_mgr.check_status(self.bootstrap_room)",
        "status = self.conclude_state or self.kv_mgr.check_status(self.bootstrap_room)",
    )
    assert nixl != NIXL_BROKEN
    workspace = _tree(tmp_path, common=SENDER_COMMON, nixl=nixl)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.APPLIED, outcome.note
    text = workspace.text("sglang/srt/disaggregation/nixl/conn.py")
    read = text.index("status = self.conclude_state or self.kv_mgr.check_status(")
    assert read < text.index("self._check_bootstrap_timeout()")


# A fork's stand-in backend: Bootstrapping until init() is called, then Success (or
# WaitingForInput, given no indices). Its ``init_time`` is a state flag that drives poll(), not
# a clock.
STATE_FLAG = """
    from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


    class NixlKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr = mgr
            self.init_time = None

        def init(self, num_kv_indices, aux_index=None):
            self.init_time = num_kv_indices

        def poll(self):
            if self.init_time is None:
                return KVPoll.Bootstrapping
            return KVPoll.Success if self.init_time else KVPoll.WaitingForInput
"""


def test_init_time_as_a_state_flag_is_refused_and_reported(tmp_path: Path) -> None:
    workspace = _tree(tmp_path, nixl=STATE_FLAG)
    outcome = SenderBootstrapTimeoutFix().plan(workspace)
    assert outcome.status is Status.REFUSED
    assert "state flag" in (outcome.note or "")
    assert outcome.where == "sglang/srt/disaggregation/nixl/conn.py:14"
    assert workspace.changed() == {}
    facts = sender_index(workspace).facts("NixlKVSender")
    assert facts.init_time_flag == 14 and not facts.healthy
