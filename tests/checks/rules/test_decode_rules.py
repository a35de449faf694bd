"""The decode-side rules: PDG006 (receiver-waits-forever) and PDG007
(decode-queue-waits-forever).

Hand-written SGLang-shaped trees show what each rule judges; the release tests run both rules
over real releases fetched through ``vendor_sglang``: one or two per decode shape family D1 -
D13 (the families of the decode reference), all 62 with ``PDGUARD_ALL_RELEASES=1``, and
assert exactly which classes and places each reports.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.checks.project import Project
from pdguard.checks.rules.pdg006_receiver_waits_forever import ReceiverWaitsForever
from pdguard.checks.rules.pdg007_decode_queue_waits_forever import (
    COUNTED,
    RETRACTION_GATE,
    UNBOUNDED,
    DecodeQueueWaitsForever,
    decode,
)
from pdguard.commands import apply as pipeline
from pdguard.commands.check import load_project
from pdguard.sglang_names import DECODE_PATH
from pdguard.tree import open_tree
from pdguard.vendor_sglang import (
    EXTRACT_PATTERNS,
    extract_members,
    fetch_release,
    fetch_wheel,
    get_release,
    load_manifest,
)

DECODE_CODES = ("PDG006", "PDG007")
VERSIONS = [r.version for r in load_manifest()]

# Decode shape families (first and last release of each), as the decode reference names them.
FAMILIES = {
    "D1": ("0.4.6", "0.4.6.post4"),  # Failed raises in both queues
    "D2": ("0.4.6.post5", "0.4.6.post5"),  # prepare_abort; no retraction gate
    "D3": ("0.4.7", "0.4.7"),
    "D4": ("0.4.7.post1", "0.4.8"),  # + retraction gate in process_decode_queue
    "D5": ("0.4.8.post1", "0.4.9"),
    "D6": ("0.4.9.post1", "0.5.2"),  # Mooncake waiting timeout (inline)
    "D7": ("0.5.3", "0.5.5.post3"),  # NIXL: a Failed path, still no timeout
    "D8": ("0.5.6", "0.5.9"),  # NIXL waiting timeout
    "D9": ("0.5.10", "0.5.12.post1"),  # receiver lifecycle split: pending_reqs
    "D10": ("0.5.13", "0.5.16"),  # _check_waiting_timeout helper
    "D11": ("0.5.17", "0.5.19"),
    "D12": ("0.5.20", "0.5.21"),
    "D13": ("0.5.22", "0.5.23"),  # CommonKVReceiver._poll
}
# One release per family, plus the releases on either side of each verdict change.
CI_RELEASES = (
    "0.4.6",  # D1
    "0.4.6.post5",  # D2
    "0.4.7",  # D3, last without the retraction gate
    "0.4.8",  # D4
    "0.4.9",  # D5, last Mooncake without a waiting timeout
    "0.4.9.post1",  # D6, first with it
    "0.5.5.post3",  # D7, last NIXL without one
    "0.5.6",  # D8, first NIXL with one
    "0.5.10",  # D9, first with pending_reqs
    "0.5.14",  # D10
    "0.5.17",  # D11
    "0.5.21",  # D12
    "0.5.23",  # D13
)
RELEASES = VERSIONS if os.environ.get("PDGUARD_ALL_RELEASES") == "1" else list(CI_RELEASES)


def _index(version: str) -> int:
    return VERSIONS.index(version)


def _within(version: str, first: str, last: str) -> bool:
    return _index(first) <= _index(version) <= _index(last)


def family(version: str) -> str:
    return next(name for name, span in FAMILIES.items() if _within(version, *span))


def expected(version: str) -> set[tuple[str, str]]:
    """What the decode reference says each release must report (verified on all 62)."""
    found = set()
    if _within(version, "0.4.6", "0.4.9"):
        found.add(("PDG006", "MooncakeKVReceiver.poll"))
    if _within(version, "0.4.6", "0.5.5.post3"):
        found.add(("PDG006", "NixlKVReceiver.poll"))
    if _within(version, "0.5.10", "0.5.23"):
        found.add(("PDG007", "DecodePreallocQueue._resolve_pending_reqs"))
    if _within(version, "0.4.7.post1", "0.5.23"):
        found.add(("PDG007", "SchedulerDisaggregationDecodeMixin.process_decode_queue"))
    return found


def test_families_cover_every_release_once() -> None:
    assert [family(v) for v in VERSIONS] == sorted(
        (family(v) for v in VERSIONS), key=lambda f: int(f[1:])
    )
    assert {family(v) for v in CI_RELEASES} == set(FAMILIES)


@pytest.mark.releases
@pytest.mark.parametrize("version", RELEASES)
def test_decode_rules_on_release(version: str) -> None:
    project = load_project(open_tree(fetch_release(version)))
    findings = checks.run(project, DECODE_CODES)
    found = [(f.code, f.symbol) for f in findings]
    assert len(found) == len(set(found)), f"{version}: a place reported twice: {found}"
    assert set(found) == expected(version), f"{version} ({family(version)})"
    for finding in findings:
        assert finding.path.startswith("sglang/srt/disaggregation/")
        line = project.texts[finding.path].splitlines()[finding.line - 1]
        if finding.symbol.endswith(".poll"):
            assert line.lstrip().startswith("def poll"), line
        elif finding.symbol.endswith("_resolve_pending_reqs"):
            # the re-queue of a request whose prefill DP rank is not known
            assert "remaining.append(" in line, line
        else:
            assert line.strip() == "return", line
            assert "retracted_queue" in finding.message
    # NIXL has no Failed path at all up to 0.5.2 (0.5.3 fails a room on a node failure).
    nixl = [f.message for f in findings if f.symbol == "NixlKVReceiver.poll"]
    if nixl:
        assert ("never returns Failed" in nixl[0]) == _within(version, "0.4.6", "0.5.2")


@pytest.mark.releases
@pytest.mark.parametrize("version", RELEASES)
def test_receivers_seen_on_release(version: str) -> None:
    """The rule looks at every real receiver: Ascend through Mooncake, Mori from 0.5.9,
    CommonKVReceiver once it has a whole poll path (0.5.23), and the fake one."""
    receivers = load_project(open_tree(fetch_release(version))).receivers
    concrete = set(receivers.concrete())
    assert {"MooncakeKVReceiver", "NixlKVReceiver"} <= concrete
    assert ("FakeKVReceiver" in concrete) == (version != "0.4.6")
    assert ("AscendKVReceiver" in concrete) == _within(version, "0.4.9.post2", "0.5.23")
    assert ("MoriKVReceiver" in concrete) == _within(version, "0.5.9", "0.5.23")
    assert ("CommonKVReceiver" in concrete) == (version == "0.5.23")
    if "FakeKVReceiver" in concrete:  # always terminal once init() ran: never reported
        assert not receivers.verdict("FakeKVReceiver").waits_forever


# --- hand-written trees ------------------------------------------------------------------

_BASE = "sglang/srt/disaggregation/base/conn.py"
_MOONCAKE = "sglang/srt/disaggregation/mooncake/conn.py"
_ASCEND = "sglang/srt/disaggregation/ascend/conn.py"
_COMMON = "sglang/srt/disaggregation/common/conn.py"

BASE = """\
from abc import ABC, abstractmethod


class KVPoll:
    Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


class BaseKVReceiver(ABC):
    @abstractmethod
    def init(self, prefill_dp_rank): ...

    @abstractmethod
    def send_metadata(self, kv_indices, aux_index=None): ...

    @abstractmethod
    def poll(self): ...
"""
# The 0.5.10+ lifecycle: Bootstrapping at construction, WaitingForInput after init(), the
# clock stamped in send_metadata(); the check in a helper of the common base.
COMMON = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class CommonKVReceiver(BaseKVReceiver):
    def __init__(self, manager, addr, room=None):
        self.kv_mgr = manager
        self.bootstrap_room = room
        manager.update_status(room, KVPoll.Bootstrapping)
        self.init_time = None
        self.conclude_state = None

    def init(self, prefill_dp_rank):
        room = self.bootstrap_room
        if self.kv_mgr.lookup(prefill_dp_rank) is None:  # no such prefill: give up now
            self.kv_mgr.update_status(room, KVPoll.Failed)
            self.conclude_state = KVPoll.Failed
            return
        self.kv_mgr.update_status(room, KVPoll.WaitingForInput)

    def _waited_too_long(self):
        if self.init_time is None:  # nothing sent yet
            return None
        age = time.time() - self.init_time
        if age < self.kv_mgr.waiting_timeout:
            return None
        self.conclude_state = KVPoll.Failed
        return KVPoll.Failed

    def send_metadata(self, kv_indices, aux_index=None):
        raise NotImplementedError
"""
MOONCAKE = """\
import time

from sglang.srt.disaggregation.common.conn import CommonKVReceiver
from sglang.srt.disaggregation.base.conn import KVPoll


class MooncakeKVReceiver(CommonKVReceiver):
    def send_metadata(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.bootstrap_room, kv_indices)
{stamp}
    def poll(self):
        if self.conclude_state is not None:
            return self.conclude_state
        state = self.kv_mgr.check_status(self.bootstrap_room)
        if state == KVPoll.WaitingForInput:
            timed_out = self._waited_too_long()
            if timed_out is not None:
                return timed_out
        elif state in (KVPoll.Success, KVPoll.Failed):
            self.conclude_state = state
        return state
"""
ASCEND = """\
from sglang.srt.disaggregation.mooncake.conn import MooncakeKVReceiver


class AscendKVReceiver(MooncakeKVReceiver):
    pass
"""
STAMP = "        self.init_time = time.time()\n"


def _receivers(stamp: str = STAMP) -> dict[str, str]:
    return {
        _BASE: BASE,
        _COMMON: COMMON,
        _MOONCAKE: MOONCAKE.format(stamp=stamp),
        _ASCEND: ASCEND,
    }


def _pdg006(texts: dict[str, str]) -> set[str]:
    return {f.symbol for f in ReceiverWaitsForever().check(Project(texts))}


def test_receivers_resolve_across_files_and_through_helpers() -> None:
    assert _pdg006(_receivers()) == set()
    receivers = Project(_receivers()).receivers
    # CommonKVReceiver's send_metadata raises NotImplementedError: a base, not a receiver.
    assert set(receivers.concrete()) == {"AscendKVReceiver", "MooncakeKVReceiver"}


def test_a_subclass_inherits_the_missing_stamp() -> None:
    findings = list(ReceiverWaitsForever().check(Project(_receivers(stamp=""))))
    assert {f.symbol for f in findings} == {"AscendKVReceiver.poll", "MooncakeKVReceiver.poll"}
    ascend = next(f for f in findings if f.symbol == "AscendKVReceiver.poll")
    # reported at the class that inherits the poll, in its own file
    assert (ascend.path, ascend.line) == (_ASCEND, 4)
    assert "WaitingForInput" in ascend.message and "never returns Failed" not in ascend.message


def test_bootstrapping_is_waiting_for_input_by_the_time_indices_are_sent() -> None:
    """The decode queue sends the indices only after poll() said WaitingForInput: a WFI-only
    timeout covers a receiver that is still Bootstrapping right after init()."""
    texts = _receivers()
    waiting = "        self.kv_mgr.update_status(room, KVPoll.WaitingForInput)\n"
    assert waiting in texts[_COMMON]
    texts[_COMMON] = texts[_COMMON].replace(waiting, "")
    assert _pdg006(texts) == set()


def test_a_status_the_receiver_sets_after_the_send_is_judged() -> None:
    texts = _receivers()
    texts[_MOONCAKE] = texts[_MOONCAKE].replace(
        STAMP,
        STAMP + "        self.kv_mgr.update_status(self.bootstrap_room, KVPoll.Transferring)\n",
    )
    # Transferring is not covered by the WaitingForInput-only check
    findings = list(ReceiverWaitsForever().check(Project(texts)))
    assert findings and all("Transferring" in f.message for f in findings)


def test_a_deadline_stamp_counts() -> None:
    texts = _receivers()
    elapsed = """        age = time.time() - self.init_time
        if age < self.kv_mgr.waiting_timeout:"""
    assert elapsed in texts[_COMMON]
    texts[_COMMON] = texts[_COMMON].replace(
        elapsed, """        if time.time() < self.init_time + self.kv_mgr.waiting_timeout:"""
    )
    assert _pdg006(texts) == set()


def _pdg007(texts: dict[str, str]) -> list[str]:
    return [f.symbol for f in DecodeQueueWaitsForever().check(Project(texts))]


def test_pending_requeue_needs_a_bound() -> None:
    texts = decode(requeue=UNBOUNDED)
    assert _pdg007(texts) == ["DecodePreallocQueue._resolve_pending_reqs"]
    assert _pdg007(decode(requeue=COUNTED)) == []


def test_retraction_gate_reported_once_per_return() -> None:
    texts = decode(gate=RETRACTION_GATE)
    [finding] = DecodeQueueWaitsForever().check(Project(texts))
    assert finding.symbol == "SchedulerDisaggregationDecodeMixin.process_decode_queue"
    assert "pop_preallocated() and disagg_decode_transfer_queue.pop_transferred()" in (
        finding.message
    )


_ADMISSION_LAST = (
    """        req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(req_conns)
        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
""",
    """        alloc_reqs = self.disagg_decode_transfer_queue.pop_transferred()
        if {condition}:
            return
        req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()
        self.disagg_decode_transfer_queue.extend(req_conns)
""",
)


def _gate_after_transfers(condition: str) -> dict[str, str]:
    texts = decode()
    decode_py = next(iter(texts))
    old, new = _ADMISSION_LAST
    assert old in texts[decode_py]
    texts[decode_py] = texts[decode_py].replace(old, new.format(condition=condition))
    return texts


def test_a_gate_that_skips_only_admission_is_back_pressure() -> None:
    """Returning after the transfer queue was polled, before the prealloc queue hands new
    requests to it, while retracted requests wait for memory, is what ``decode-queue-bound``
    makes of the gate (and what the PP mixin's ``process_prealloc_queue`` does): the
    requests it skips hold no KV yet. The gate is not reported; the pending list's retry
    counter, which only pop_preallocated() reaches, is (seed 41): behind the gate it never
    runs while retracted requests wait."""
    texts = _gate_after_transfers("len(self.disagg_decode_prealloc_queue.retracted_queue) > 0")
    [finding] = DecodeQueueWaitsForever().check(Project(texts))
    assert finding.symbol == "DecodePreallocQueue._resolve_pending_reqs"
    assert "bounded only where the polling functions call it behind the retraction gate" in (
        finding.message
    )
    # the bound also run before the gate, on every step: nothing to report
    decode_py = next(iter(texts))
    texts[decode_py] = texts[decode_py].replace(
        "    def process_decode_queue(self):\n",
        "    def process_decode_queue(self):\n"
        "        self.disagg_decode_prealloc_queue._resolve_pending_reqs()\n",
    )
    assert list(DecodeQueueWaitsForever().check(Project(texts))) == []


def test_a_gate_that_skips_admission_on_another_condition_is_reported() -> None:
    texts = _gate_after_transfers("self.paused")
    [finding] = DecodeQueueWaitsForever().check(Project(texts))
    assert "pop_transferred" not in finding.message and "pop_preallocated" in finding.message


def test_a_gate_that_skips_a_poll_whose_requests_are_not_handed_on_is_reported() -> None:
    """Only a poll whose popped requests go to another decode queue is an admission."""
    texts = _gate_after_transfers("len(self.disagg_decode_prealloc_queue.retracted_queue) > 0")
    decode_py = next(iter(texts))
    texts[decode_py] = texts[decode_py].replace(
        "        self.disagg_decode_transfer_queue.extend(req_conns)\n", ""
    )
    [finding] = DecodeQueueWaitsForever().check(Project(texts))
    assert "pop_preallocated" in finding.message


def test_decode_rules_are_selectable() -> None:
    assert {"PDG006", "PDG007"} <= set(checks.CODES)
    texts = {**decode(gate=RETRACTION_GATE), **_receivers(stamp="")}
    assert {f.code for f in checks.run(Project(texts))} == {"PDG006", "PDG007"}
    assert checks.run(Project(texts), ("PDG001", "PDG002", "PDG003", "PDG004", "PDG005")) == []


def test_a_stamp_taken_at_construction_is_reported_as_the_wrong_clock() -> None:
    """A clock started in the constructor (as sgl-project/sglang#21477 proposed, closed
    unmerged) fires once the indices were sent, so the receiver does not wait forever; but it
    also counts the wait for decode memory in the prealloc queue, so it fails requests under
    plain back-pressure: reported as a bound on the wrong clock, not as a wait forever."""
    texts = _receivers(stamp="")
    texts[_COMMON] = texts[_COMMON].replace(
        "        self.init_time = None\n", "        self.init_time = time.time()\n"
    )
    findings = [f for f in checks.run(Project(texts), ["PDG006"])]
    assert {f.symbol for f in findings} == {"AscendKVReceiver.poll", "MooncakeKVReceiver.poll"}
    for finding in findings:
        assert "wait forever" not in finding.message
        assert "counts from before the indices were sent" in finding.message


def test_elapsed_time_on_another_clock_does_not_bound() -> None:
    """``time.monotonic()`` minus a ``time.time()`` stamp is no elapsed time: reported."""
    texts = _receivers()
    assert _pdg006(texts) == set()
    common = texts[_COMMON]
    assert "time.time() - self.init_time" in common
    texts[_COMMON] = common.replace(
        "time.time() - self.init_time", "time.monotonic() - self.init_time"
    )
    assert _pdg006(texts) == {"AscendKVReceiver.poll", "MooncakeKVReceiver.poll"}


def test_a_bare_return_before_the_stamp_is_judged() -> None:
    """A send that returns early without failing the room leaves init_time None: reported."""
    texts = _receivers()
    texts[_MOONCAKE] = texts[_MOONCAKE].replace(
        "        self.kv_mgr.send(self.bootstrap_room, kv_indices)\n",
        "        if not kv_indices:\n            return\n"
        "        self.kv_mgr.send(self.bootstrap_room, kv_indices)\n",
    )
    assert _pdg006(texts) == {"AscendKVReceiver.poll", "MooncakeKVReceiver.poll"}


@pytest.mark.releases
def test_check_cli_reports_the_decode_rules(capsys: pytest.CaptureFixture[str]) -> None:
    from pdguard.cli import main

    root = fetch_release("0.4.8")
    assert main(["check", str(root), "--select", "PDG006,PDG007", "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    assert sorted((f["code"], f["symbol"]) for f in found) == sorted(expected("0.4.8"))
    # the prefill fix alone: 0.4.8 has no inflight deadline, so PDG001 still fails it
    assert main(["check", str(root), "--ignore", "PDG006,PDG007", "--format", "json"]) == 1
    codes = {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert codes and codes <= {"PDG001", "PDG002", "PDG003", "PDG004", "PDG005"}


def test_elapsed_time_in_a_local_counts() -> None:
    from pdguard.checks.rules.pdg007_decode_queue_waits_forever import CALL_HELPER, HELPER, TIMED

    waited = TIMED.replace(
        "if time.monotonic() - decode_req.entered_at > TIMEOUT:",
        "waited = time.monotonic() - decode_req.entered_at\n" + " " * 16 + "if waited > TIMEOUT:",
    )
    assert "waited = " in waited
    assert _pdg007(decode(requeue=waited)) == []
    helper = HELPER.replace(
        "            if now - decode_req.entered_at > TIMEOUT:",
        "            age = now - decode_req.entered_at\n            if age > TIMEOUT:",
    )
    assert "age = " in helper
    assert _pdg007(decode(requeue=UNBOUNDED, helper=helper, call_helper=CALL_HELPER)) == []


_PEER_LOST = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class SketchKVManager:
    def __init__(self):
        self.request_status = {{}}
        self.chunks_seen = {{}}
        self.rooms_by_peer = {{}}

    def update_status(self, room, status):
        self.request_status[room] = status

    def _handle_node_failure(self, peer):
        rooms = self.rooms_by_peer.pop(peer, set())
        for room in rooms:
            if room in self.{table}:
                self.update_status(room, KVPoll.Failed)
{extra}

class SketchKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, peer, room):
        self.kv_mgr = mgr
        self.room = room
        self.init_time = None
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

    def init(self, prefill_dp_rank):
        self.prefill_dp_rank = prefill_dp_rank

    def send_metadata(self, kv_indices, aux_index=None):
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.request_status[self.room]
        if status in (KVPoll.Success, KVPoll.Failed):
            return status
        if time.time() - self.init_time > 300:
            return KVPoll.Failed
        return status
"""
_EVERY_ROOM = """\
        for room in rooms:
            self.update_status(room, KVPoll.Failed)
"""


def _peer_lost(table: str, extra: str = "") -> list[str]:
    rel = "sglang/srt/disaggregation/sketch/conn.py"
    texts = {_BASE: BASE, rel: _PEER_LOST.format(table=table, extra=extra)}
    return [f.message for f in checks.run(Project(texts), ["PDG006"])]


def test_a_lost_prefill_must_fail_every_tracked_room() -> None:
    """The node-failure handler fails a room only if a chunk was seen for it (a table nothing
    on the receiver's side fills): reported. Guarded by a table the receiver's constructor
    fills (through update_status), or followed by a loop that fails every room: not."""
    [message] = _peer_lost("chunks_seen")
    assert message == (
        "SketchKVReceiver is not failed when its prefill is lost: when its prefill is lost, "
        "SketchKVManager._handle_node_failure() fails a tracked room only if it is in "
        "self.chunks_seen, which the receiver never fills for its room: a room no chunk "
        "reached yet is not failed"
    )
    assert _peer_lost("request_status") == []
    assert _peer_lost("chunks_seen", _EVERY_ROOM) == []


# -- the PP mixin's disaggregated decode loop (managers/scheduler_pp_mixin.py, 0.5.7+) --------

PP_MIXIN = "sglang/srt/managers/scheduler_pp_mixin.py"
# The first and last release with the PP decode loop, and one between (all with the env var).
PP_RELEASES = [
    v
    for v in VERSIONS[VERSIONS.index("0.5.7") :]
    if v in ("0.5.7", "0.5.17", "0.5.23") or os.environ.get("PDGUARD_ALL_RELEASES") == "1"
]


def _with_pp_mixin(version: str, dest: Path) -> Path:
    """The release's vendored tree plus its PP mixin, extracted from the pinned wheel."""
    extract_members(fetch_wheel(get_release(version)), dest, (*EXTRACT_PATTERNS, PP_MIXIN))
    assert (dest / PP_MIXIN).is_file()
    return dest


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    [func] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return func


def _polling_functions(texts: dict[str, str]) -> dict[str, list[str]]:
    """The PP mixin's functions that pop a decode queue -> the pop methods they call."""
    model = Project(texts).decode_queues
    polls = model.poll_methods()
    found = {}
    for func in ast.walk(ast.parse(texts[PP_MIXIN])):
        if isinstance(func, ast.FunctionDef):
            calls = sorted(
                c.func.attr
                for c in model.facts(func).queue_calls
                if isinstance(c.func, ast.Attribute) and c.func.attr in polls
            )
            if calls:
                found[func.name] = calls
    return found


@pytest.mark.releases
@pytest.mark.parametrize("version", PP_RELEASES)
def test_pp_mixin_gate_skips_only_admission(version: str, tmp_path: Path) -> None:
    """Under PP the decode loop polls the transfer queue in ``process_decode_transfer_queue``,
    which has no gate; ``process_prealloc_queue`` returns while retracted requests wait, before
    ``pop_preallocated()`` only, whose requests hold no KV yet: no finding in the mixin itself.
    But the pending bound runs inside ``pop_preallocated()``, so apply gives the mixin the call
    ``process_decode_queue`` gets (``poll_pending_reqs()`` before the gate, with the stages'
    consensus), and check is clean after apply. The same gate put back in front of the
    transfer queue's poll is reported."""
    root = _with_pp_mixin(version, tmp_path / "tree")
    texts = load_project(open_tree(root)).texts
    assert _polling_functions(texts) == {
        "process_prealloc_queue": ["pop_preallocated"],
        "process_decode_transfer_queue": ["pop_transferred"],
    }
    assert [f for f in checks.run(Project(texts)) if f.path == PP_MIXIN] == []

    original = (root / PP_MIXIN).read_bytes()
    result = pipeline.plan(open_tree(root))
    assert not result.refused
    pipeline.write(result)
    patched = (root / PP_MIXIN).read_text()
    decode = (root / DECODE_PATH).read_text()
    if "def poll_pending_reqs(" not in decode:  # no pending queue to bound (before 0.5.10)
        assert patched == original.decode()
    else:
        call = patched.index(".poll_pending_reqs(")
        gate = patched.index("retracted_queue", patched.index("def process_prealloc_queue"))
        assert call < gate  # before the gate, on every step
    texts = load_project(open_tree(root)).texts
    assert checks.run(Project(texts)) == []

    # the retraction gate in front of the transfer queue's poll too (on the patched tree)
    text = texts[PP_MIXIN]
    func = _function(ast.parse(text), "process_decode_transfer_queue")
    first = func.body[0]
    indent = " " * first.col_offset
    lines = text.splitlines(keepends=True)
    lines[first.lineno - 1 : first.lineno - 1] = [
        f"{indent}if self.disagg_decode_prealloc_queue.retracted_queue:\n",
        f"{indent}    return None\n",
    ]
    gated = {**texts, PP_MIXIN: "".join(lines)}
    [finding] = checks.run(Project(gated), ["PDG007"])
    assert (finding.path, finding.symbol) == (
        PP_MIXIN,
        "SchedulerPPMixin.process_decode_transfer_queue",
    )
    assert "pop_transferred()" in finding.message


def test_a_kept_receiver_verdict_is_reused_only_while_its_answers_hold() -> None:
    """A verdict is kept with what it asked of the class index; another index that answers
    the same (the same class nodes) reuses it, and one where a method the verdict read
    changed works it out again."""
    from pdguard.checks.project import Project
    from pdguard.run import Run

    texts = {
        "sglang/srt/disaggregation/base/conn.py": (
            "class BaseKVReceiver:\n    def poll(self):\n        raise NotImplementedError\n"
        ),
        "sglang/srt/disaggregation/toy/conn.py": (
            "from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll\n\n\n"
            "class ToyKVReceiver(BaseKVReceiver):\n"
            "    def __init__(self, mgr):\n"
            "        self.kv_mgr = mgr\n\n"
            "    def init(self, indices):\n"
            "        self.sent = True\n\n"
            "    def poll(self):\n"
            "        return KVPoll.WaitingForInput\n"
        ),
    }
    run = Run()  # one run: the projects share its parsed trees and kept verdicts
    first = Project(texts, run).receivers.verdict("ToyKVReceiver")
    assert first.violates
    # another project over the same texts (the same parsed trees): the verdict is reused
    assert Project(dict(texts), run).receivers.verdict("ToyKVReceiver") is first
    # poll() now fails the wait: the kept verdict's answers no longer hold
    rel = "sglang/srt/disaggregation/toy/conn.py"
    changed = dict(texts)
    changed[rel] = texts[rel].replace("KVPoll.WaitingForInput", "KVPoll.Failed")
    again = Project(changed, run).receivers.verdict("ToyKVReceiver")
    assert again is not first and not again.violates
    assert len(run.verdicts) == 1 and len(run.verdicts.get("ToyKVReceiver") or []) == 2
    # another run shares nothing with this one: its verdict is its own
    other = Run()
    alone = Project(texts, other).receivers.verdict("ToyKVReceiver")
    assert alone is not first and alone.violates and len(other.verdicts) == 1
