"""The fail action ``conclude_failure()`` (0.5.20+), judged by what it does in the tree.

A deadline that fails an overdue sender through its manager
(``sender.kv_mgr.conclude_failure(...)``) bounds the wait only where that method marks the
room Failed (itself or through what it calls, with the status it is passed) and the sender's
``poll()`` then reports the room's status: ``ClassIndex.abort_honoured`` on a manager method.
"""

from __future__ import annotations

import pytest

from pdguard.checks.project import Project
from tests.corpus import _BASE, BACKEND_CONN, BASE_CONN, PREFILL, _expiring, verdicts
from tests.corpus import Case as CorpusCase

_CONCLUDE = (
    "                req.disagg_kv_sender.kv_mgr.conclude_failure(\n"
    '                    bootstrap_room=req.bootstrap_room, failure_reason="late"\n'
    "                )\n"
)

# A manager whose conclude_failure() hands KVPoll.Failed on to conclude_transfer(), which
# marks the room with the status it was given; a sender that answers its concluded state
# (only ever Success or Failed) first, then the room's status.
_BACKEND = """\
from sglang.srt.disaggregation.base.conn import BaseKVManager, BaseKVSender, KVPoll


class ForkKVManager(BaseKVManager):
    def __init__(self):
        self.request_status = {}
        self.failure_records = {}

    def update_status(self, room, status):
        self.request_status[room] = status

    def check_status(self, room):
        return self.request_status[room]

    def conclude_transfer(self, *, bootstrap_room, status, failure_reason=None):
        if bootstrap_room not in self.request_status:
            return None
        if status == KVPoll.Failed:
            self.failure_records.setdefault(bootstrap_room, failure_reason)
        self.update_status(bootstrap_room, status)
        return status

    def conclude_failure(self, *, bootstrap_room, failure_reason):
        room, why = bootstrap_room, failure_reason
        return self.conclude_transfer(bootstrap_room=room, status=KVPoll.Failed, failure_reason=why)


class ForkKVSender(BaseKVSender):
    def __init__(self, mgr: ForkKVManager, bootstrap_addr, room):
        self.conclude_state = None
        self.kv_mgr, self.bootstrap_room = mgr, room

    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        state = self.kv_mgr.check_status(self.bootstrap_room)
        if state in (KVPoll.Failed, KVPoll.Success):
            self.conclude_state = state
        return state

    def abort(self):
        self.conclude_state = KVPoll.Failed
"""

# (name, the backend's text, what check must report)
_CASES = [
    ("concludes-failed", _BACKEND, set()),
    (
        "conclude-records-only",
        _BACKEND.replace("        self.update_status(bootstrap_room, status)\n", ""),
        {"PDG002"},
    ),
    (
        "conclude-passes-another-status",
        _BACKEND.replace("status=KVPoll.Failed,", "status=KVPoll.Transferring,"),
        {"PDG002"},
    ),
    (
        "status-overwritten-before-marking",
        _BACKEND.replace(
            "        self.update_status(bootstrap_room, status)\n",
            "        status = KVPoll.Transferring\n"
            "        self.update_status(bootstrap_room, status)\n",
        ),
        {"PDG002"},
    ),
    (
        "poll-concludes-a-non-terminal-state",
        _BACKEND.replace(
            "            self.conclude_state = state\n",
            "            self.conclude_state = state\n"
            "        self.conclude_state = KVPoll.Transferring\n",
        ),
        {"PDG002"},
    ),
    (
        "sender-without-manager-annotation",
        _BACKEND.replace("mgr: ForkKVManager", "mgr"),
        {"PDG002"},
    ),
]


def _files(backend: str) -> dict[str, str]:
    return {PREFILL: _expiring(body=_CONCLUDE), BASE_CONN: _BASE, BACKEND_CONN: backend}


@pytest.mark.parametrize(("name", "backend", "expected"), _CASES, ids=[c[0] for c in _CASES])
def test_conclude_failure_is_judged_by_what_it_does(
    name: str, backend: str, expected: set[str]
) -> None:
    assert backend != _BACKEND or name == "concludes-failed"
    got = verdicts(CorpusCase(name, _files(backend)))
    if expected:
        assert expected <= got, got  # the sender keeps its old state: the wait is unbounded
    else:
        assert got == set(), got


def test_a_manager_method_fails_the_sender_through_the_status_it_is_passed() -> None:
    index = Project(_files(_BACKEND)).classes
    assert index.marks_room_failed("ForkKVManager", "conclude_failure")
    assert not index.marks_room_failed("ForkKVManager", "check_status")
    assert index.abort_honoured("ForkKVSender", "conclude_failure")
    # a manager method that does not mark the room: the sender is not failed by it
    assert not index.abort_honoured("ForkKVSender", "check_status")
