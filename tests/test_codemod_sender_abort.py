"""``SenderAbort`` on hand-written sender snippets (the test's own names, shaped like the
senders of SGLang's releases), and what the code it writes does once run."""

from __future__ import annotations

import types

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.sender_abort import SenderAbort

# A transfer-handle sender: once everything is handed over, poll() reads the handles only
# (as NIXL's does up to 0.5.11), and it has no abort() of its own.
HANDLES = '''\
from relay.base import BaseKVSender, KVPoll


class RelayKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.handles = []
        self.handed_over = False

    def poll(self) -> KVPoll:
        """Where the transfer stands."""
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        if all(self.kv_mgr.finished(h) for h in self.handles):
            return KVPoll.Success
        return KVPoll.Transferring

    def failure_exception(self):
        raise RuntimeError("relay sender failed")
'''

HANDLES_FIXED = '''\
from relay.base import BaseKVSender, KVPoll


class RelayKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.handles = []
        self.handed_over = False
        # pdguard: sender-abort: set by abort(), reported by poll().
        self.conclude_state = None

    def poll(self) -> KVPoll:
        """Where the transfer stands."""
        # pdguard: sender-abort: once aborted, the transfer is over.
        if self.conclude_state is not None:
            return self.conclude_state
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        if all(self.kv_mgr.finished(h) for h in self.handles):
            return KVPoll.Success
        return KVPoll.Transferring

    # pdguard: sender-abort: poll() reports Failed from now on.
    def abort(self):
        self.conclude_state = KVPoll.Failed

    def failure_exception(self):
        raise RuntimeError("relay sender failed")
'''

# A sender that already returns its concluded state first but has no abort() (as Mooncake's
# up to 0.4.9.post4).
CONCLUDING = """\
from relay.base import BaseKVSender, KVPoll


class TideKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.conclude_state = None

    def poll(self) -> KVPoll:
        if self.conclude_state is None:
            status = self.kv_mgr.check_status(self.bootstrap_room)
            if status in (KVPoll.Success, KVPoll.Failed):
                self.conclude_state = status
            return status
        else:
            return self.conclude_state
"""

CONCLUDING_FIXED = """\
from relay.base import BaseKVSender, KVPoll


class TideKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.conclude_state = None

    def poll(self) -> KVPoll:
        if self.conclude_state is None:
            status = self.kv_mgr.check_status(self.bootstrap_room)
            if status in (KVPoll.Success, KVPoll.Failed):
                self.conclude_state = status
            return status
        else:
            return self.conclude_state

    # pdguard: sender-abort: poll() reports Failed from now on.
    def abort(self):
        self.conclude_state = KVPoll.Failed
"""


class TestSenderAbort(CodemodTest):
    TRANSFORM = SenderAbort

    def test_handle_reading_sender_gets_all_three(self) -> None:
        self.assertCodemod(HANDLES, HANDLES_FIXED, class_name="RelayKVSender")

    def test_sender_that_returns_its_concluded_state_first_gets_abort_only(self) -> None:
        self.assertCodemod(
            CONCLUDING,
            CONCLUDING_FIXED,
            class_name="TideKVSender",
            init_state=False,
            check_first=False,
        )

    def test_inherited_abort_is_kept(self) -> None:
        # an abort() inherited from a base that concludes Failed (NIXL 0.5.10 - 0.5.11): the
        # class gets the state and the check, no abort() of its own
        out = _patch(HANDLES, class_name="RelayKVSender", add_abort=False)
        assert "def abort" not in out
        assert "if self.conclude_state is not None:\n            return self.conclude_state" in out

    def test_only_the_named_class_changes(self) -> None:
        src = HANDLES + "\n\n" + HANDLES.split("\n\n\n", 1)[1].replace("Relay", "Other")
        out = _patch(src, class_name="OtherKVSender")
        relay = out[: out.index("class OtherKVSender")]
        assert "pdguard" not in relay and out.count("# pdguard: sender-abort") == 3


@pytest.mark.parametrize(
    ("src", "options", "message"),
    [
        (HANDLES, {"class_name": "MissingKVSender"}, "no method __init__"),
        (
            HANDLES.replace("from relay.base import BaseKVSender, KVPoll\n", ""),
            {"class_name": "RelayKVSender", "init_state": False, "check_first": False},
            "KVPoll is not imported",
        ),
        (
            HANDLES.replace("        self.handed_over = False\n", "        return\n"),
            {"class_name": "RelayKVSender"},
            "ends with a return",
        ),
    ],
)
def test_anchor_errors(src: str, options: dict, message: str) -> None:
    with pytest.raises(AnchorError, match=message):
        _patch(src, **options)


def _patch(src: str, **options: object) -> str:
    codemod = SenderAbort(CodemodContext(), **options)  # type: ignore[arg-type]
    return codemod.transform_module(cst.parse_module(src)).code


def test_the_written_code_reports_failed_once_aborted_and_not_before() -> None:
    """The fixed sender run with a stand-in manager: poll() goes on reading the handles until
    abort(), then reports Failed on every later poll, whatever the handles say."""
    code = HANDLES_FIXED.replace("from relay.base import BaseKVSender, KVPoll\n", "")
    kvpoll = types.SimpleNamespace(
        Failed=0, Bootstrapping=1, WaitingForInput=2, Transferring=3, Success=4
    )
    namespace: dict[str, object] = {"BaseKVSender": object, "KVPoll": kvpoll}
    exec(compile(code, "relay_conn", "exec"), namespace)
    manager = types.SimpleNamespace(
        check_status=lambda room: kvpoll.WaitingForInput, finished=lambda handle: False
    )
    sender = namespace["RelayKVSender"](manager, 7)  # type: ignore[operator]
    assert sender.poll() == kvpoll.WaitingForInput
    sender.handles, sender.handed_over = ["first chunk"], True
    assert sender.poll() == kvpoll.Transferring
    sender.abort()
    assert sender.poll() == kvpoll.Failed
    manager.finished = lambda handle: True
    assert sender.poll() == kvpoll.Failed
    assert "poll" not in vars(sender)
