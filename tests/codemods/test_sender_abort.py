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
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        self.handles = []
        self.handed_over = False

    def failure_exception(self):
        raise RuntimeError("relay sender failed")

    def poll(self) -> KVPoll:
        """Where the transfer stands."""
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        done = all(self.kv_mgr.finished(h) for h in self.handles)
        return KVPoll.Success if done else KVPoll.Transferring
'''

HANDLES_FIXED = '''\
from relay.base import BaseKVSender, KVPoll


class RelayKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        self.handles = []
        self.handed_over = False
        # pdguard: sender-abort: set by abort(), reported by poll().
        self.conclude_state = None

    def failure_exception(self):
        raise RuntimeError("relay sender failed")

    def poll(self) -> KVPoll:
        """Where the transfer stands."""
        # pdguard: sender-abort: once aborted, the transfer is over.
        if self.conclude_state is not None:
            return self.conclude_state
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        done = all(self.kv_mgr.finished(h) for h in self.handles)
        return KVPoll.Success if done else KVPoll.Transferring

    # pdguard: sender-abort: poll() reports Failed from now on.
    def abort(self):
        self.conclude_state = KVPoll.Failed
'''

# A sender that already returns its concluded state first but has no abort() (as Mooncake's
# up to 0.4.9.post4).
CONCLUDING = '''\
from relay.base import BaseKVSender, KVPoll


class TideKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.conclude_state = None
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room

    def poll(self) -> KVPoll:
        """The manager's status, kept once it is final."""
        if self.conclude_state is not None:
            return self.conclude_state
        polled = self.kv_mgr.check_status(self.bootstrap_room)
        if polled == KVPoll.Success or polled == KVPoll.Failed:
            self.conclude_state = polled
        return polled
'''

CONCLUDING_FIXED = '''\
from relay.base import BaseKVSender, KVPoll


class TideKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.conclude_state = None
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room

    def poll(self) -> KVPoll:
        """The manager's status, kept once it is final."""
        if self.conclude_state is not None:
            return self.conclude_state
        polled = self.kv_mgr.check_status(self.bootstrap_room)
        if polled == KVPoll.Success or polled == KVPoll.Failed:
            self.conclude_state = polled
        return polled

    # pdguard: sender-abort: poll() reports Failed from now on.
    def abort(self):
        self.conclude_state = KVPoll.Failed
'''


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


# A sender whose manager keeps failure records but whose failure_exception() reads none: an
# earlier error of its own first, then a fixed text (as NIXL's 0.5.10 - 0.5.12.post1).
RECORDLESS = '''\
import threading


class RelayKVManager:
    def __init__(self):
        self.errors = {}
        self.failure_lock = threading.Lock()
        self.failure_records = {}

    def record_failure(self, room, why):
        with self.failure_lock:
            self.failure_records[room] = why


class RelayKVSender:
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        self.own_error = None

    def abort(self):
        self.kv_mgr.record_failure(self.bootstrap_room, "aborted on request")

    def failure_exception(self):
        """Why the transfer failed."""
        if self.own_error is not None:
            raise self.own_error
        err = self.kv_mgr.errors.pop(self.bootstrap_room, None)
        if err is not None:
            raise err
        raise RuntimeError("relay sender failed")
'''

RECORDLESS_FIXED = RECORDLESS.replace(
    '''        """Why the transfer failed."""
        if self.own_error''',
    '''        """Why the transfer failed."""
        # pdguard: sender-abort: take the room's failure record (abort() and the
        # deadline write one), so that the client reads why and no record stays behind.
        with self.kv_mgr.failure_lock:
            failure_reason = self.kv_mgr.failure_records.pop(self.bootstrap_room, None)
        if self.own_error''',
).replace(
    """            raise err
        raise RuntimeError""",
    """            raise err
        # pdguard: sender-abort: the recorded reason, where there is one.
        if failure_reason is not None:
            raise RuntimeError(failure_reason)
        raise RuntimeError""",
)

READ_ONLY = {"init_state": False, "check_first": False, "add_abort": False, "read_record": True}


class TestReadRecord(CodemodTest):
    TRANSFORM = SenderAbort

    def test_failure_exception_takes_the_record_first_and_raises_it_before_the_fixed_text(
        self,
    ) -> None:
        assert RECORDLESS_FIXED.count("# pdguard: sender-abort") == 2
        self.assertCodemod(RECORDLESS, RECORDLESS_FIXED, class_name="RelayKVSender", **READ_ONLY)

    def test_a_module_with_kv_transfer_error_raises_it_with_the_room(self) -> None:
        src = RECORDLESS.replace(
            "import threading\n", "import threading\n\nfrom relay.errors import KVTransferError\n"
        )
        out = _patch(src, class_name="RelayKVSender", **READ_ONLY)
        assert "raise KVTransferError(self.bootstrap_room, failure_reason)" in out


def test_read_record_needs_a_fixed_raise_at_the_end() -> None:
    src = RECORDLESS.replace('raise RuntimeError("relay sender failed")', "return None")
    with pytest.raises(AnchorError, match="does not end by raising a fixed text"):
        _patch(src, class_name="RelayKVSender", **READ_ONLY)


def _recordless_run() -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(RECORDLESS_FIXED, "relay_conn", "exec"), namespace)
    return namespace


def test_an_aborted_sender_raises_its_recorded_reason_and_pops_it() -> None:
    """The fixed sender run: abort() records a reason, the deadline replaces it with its own,
    and failure_exception() raises that reason and leaves no record behind (another room's
    stays)."""
    namespace = _recordless_run()
    manager = namespace["RelayKVManager"]()  # type: ignore[operator]
    sender = namespace["RelayKVSender"](manager, 7)  # type: ignore[operator]
    manager.record_failure(8, "another room's failure")
    sender.abort()
    manager.record_failure(7, "timed out after 300s in the prefill inflight queue")
    with pytest.raises(RuntimeError, match=r"^timed out after 300s in the prefill inflight"):
        sender.failure_exception()
    assert manager.failure_records == {8: "another room's failure"}
    # no record left: the release's fixed text, as before
    with pytest.raises(RuntimeError, match=r"^relay sender failed$"):
        sender.failure_exception()


def test_the_release_own_errors_keep_precedence_and_the_record_is_still_popped() -> None:
    namespace = _recordless_run()
    manager = namespace["RelayKVManager"]()  # type: ignore[operator]
    sender = namespace["RelayKVSender"](manager, 7)  # type: ignore[operator]
    sender.abort()
    sender.own_error = ValueError("handshake lost")
    with pytest.raises(ValueError, match="handshake lost"):
        sender.failure_exception()
    assert manager.failure_records == {}
    sender.own_error = None
    sender.abort()
    manager.errors[7] = OSError("peer gone")
    with pytest.raises(OSError, match="peer gone"):
        sender.failure_exception()
    assert manager.failure_records == {}


# A sender that posts its transfers itself and polls their states (as NIXL's up to 0.5.11).
POSTED = """\
from relay.base import BaseKVSender, KVPoll


class RelayKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_room):
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        self.posted = []
        self.handed_over = False

    def poll(self) -> KVPoll:
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        states = [self.kv_mgr.agent.state_of(h) for h in self.posted]
        if all([s == "OVER" for s in states]):
            return KVPoll.Success
        if any([s == "BROKEN" for s in states]):
            raise Exception("relay transfer broke")
        return KVPoll.WaitingForInput
"""


def test_an_aborted_sender_reports_failed_only_once_its_posted_transfers_ended() -> None:
    """No KV freed under a posted transfer: abort() during a transfer the sender posted
    holds Failed (upon which the scheduler frees the pages) until no posted transfer still
    runs (it ended, or broke); the check is written from the release's own poll()."""
    out = _patch(POSTED, class_name="RelayKVSender")
    assert 'if not all(state in ("OVER", "BROKEN") for state in states):' in out
    kvpoll = types.SimpleNamespace(
        Failed=0, Bootstrapping=1, WaitingForInput=2, Transferring=3, Success=4
    )
    namespace: dict[str, object] = {"BaseKVSender": object, "KVPoll": kvpoll}
    exec(
        compile(out.replace("from relay.base import BaseKVSender, KVPoll\n", ""), "r", "exec"),
        namespace,
    )
    states = {"chunk-1": "OVER", "chunk-2": "RUNNING"}
    agent = types.SimpleNamespace(state_of=lambda handle: states[handle])
    manager = types.SimpleNamespace(check_status=lambda room: kvpoll.WaitingForInput, agent=agent)
    sender = namespace["RelayKVSender"](manager, 7)  # type: ignore[operator]
    sender.abort()  # before anything was posted: Failed at once
    assert sender.poll() == kvpoll.Failed
    sender = namespace["RelayKVSender"](manager, 8)  # type: ignore[operator]
    sender.posted, sender.handed_over = ["chunk-1", "chunk-2"], True
    sender.abort()
    assert [sender.poll() for _ in range(3)] == [kvpoll.Transferring] * 3
    states["chunk-2"] = "BROKEN"
    assert sender.poll() == kvpoll.Failed
    states["chunk-2"] = "OVER"
    assert sender.poll() == kvpoll.Failed  # concluded: never Success after the abort
