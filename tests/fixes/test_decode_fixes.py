"""The decode-side fixes, ``receiver-waiting-timeout`` (PDG006) and ``decode-queue-bound``
(PDG007): their codemods on hand-written snippets shaped like SGLang's releases, and
``pdguard apply`` on one fetched release per decode shape family (D1 - D13 of the decode
reference; all 62 with ``PDGUARD_ALL_RELEASES=1``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.cli import main
from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.decode_queue_bound import DecodeQueueBound
from pdguard.codemods.receiver_waiting_timeout import NixlHeartbeatRooms, ReceiverWaitingTimeout
from pdguard.vendor_sglang import fetch_release, load_manifest
from tests.quality import black_complaints, isort_complaints, ruff_findings

_VERSIONS = [r.version for r in load_manifest()]


def _at_least(version: str, first: str) -> bool:
    return _VERSIONS.index(version) >= _VERSIONS.index(first)


def decode_expected(version: str) -> dict[str, str]:
    """The decode fixes' statuses on a release (the decode reference's ranges, checked)."""
    if not _at_least(version, "0.4.6.post5"):
        receiver = "refused"  # D1: a decode Failed poll raises
    elif not _at_least(version, "0.5.6"):
        receiver = "applied"  # Mooncake up to 0.4.9, NIXL up to 0.5.5.post3
    else:
        receiver = "upstream"
    # No pending re-queue and no retraction gate before 0.4.7.post1.
    queues = "applied" if _at_least(version, "0.4.7.post1") else "upstream"
    return {"receiver-waiting-timeout": receiver, "decode-queue-bound": queues}


# One release per decode family (D1 - D13).
DECODE_CI = (
    "0.4.6",
    "0.4.6.post5",
    "0.4.7",
    "0.4.8",
    "0.4.9",
    "0.5.2",
    "0.5.3",
    "0.5.6",
    "0.5.10",
    "0.5.14",
    "0.5.17",
    "0.5.20",
    "0.5.23",
)
RELEASES = [v for v in _VERSIONS if v in DECODE_CI or os.environ.get("PDGUARD_ALL_RELEASES") == "1"]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{") :])


@pytest.mark.releases
@pytest.mark.parametrize("version", RELEASES)
def test_decode_fixes_on_release(
    version: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / f"sglang-{version}"
    shutil.copytree(fetch_release(version), root)
    before = _snapshot(root)
    monkeypatch.chdir(root)  # apply names files relative to the current directory
    code, report = _json(capsys, "apply", ".", "--format", "json")
    monkeypatch.chdir(tmp_path)  # ruff below must not leave its cache in the tree
    expected = decode_expected(version)
    assert {name: report["fixes"][name] for name in expected} == expected, report["notes"]
    if expected["receiver-waiting-timeout"] == "refused":
        assert code == 2
        assert "raises" in report["notes"]["receiver-waiting-timeout"]
        assert _snapshot(root) == before
        return
    assert code == 0
    after = _snapshot(root)
    for rel in report["files_changed"]:
        old, new = before[rel].decode(), after[rel].decode()
        compile(new, rel, "exec")
        assert black_complaints(old, new) == [], rel
        assert isort_complaints(old, new) == [], rel
        original = tmp_path / "original.py"
        original.write_bytes(before[rel])
        assert ruff_findings(root / rel) == ruff_findings(original), rel

    if _at_least(version, "0.5.3") and not _at_least(version, "0.5.6"):
        # NIXL 0.5.3 - 0.5.5.post3: 0.5.6's heartbeat change is ported with the timeout.
        assert "heartbeat fails every tracked room" in report["notes"]["receiver-waiting-timeout"]

    # Proved: the decode rules are silent on the patched tree.
    code, findings = _json(
        capsys, "check", str(root), "--select", "PDG006,PDG007", "--format", "json"
    )
    assert (code, findings["findings"]) == (0, [])

    # Idempotent: no byte changes, pdguard's fixes present.
    code, again = _json(capsys, "apply", str(root), "--format", "json")
    assert code == 0 and again["files_changed"] == []
    assert _snapshot(root) == after
    assert {name: again["fixes"][name] for name in expected} == {
        name: "present" if status == "applied" else status for name, status in expected.items()
    }


@pytest.mark.releases
def test_unpatched_releases_report_what_the_fixes_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """The rules report the unpatched trees: the fixes have something to prove."""
    tree = str(fetch_release("0.5.3"))
    code, report = _json(capsys, "check", tree, "--select", "PDG006,PDG007", "--format", "json")
    assert code == 1
    assert {(f["code"], f["symbol"]) for f in report["findings"]} == {
        ("PDG006", "NixlKVReceiver.poll"),
        ("PDG007", "SchedulerDisaggregationDecodeMixin.process_decode_queue"),
    }


# -- the codemods on hand-written snippets ------------------------------------------------


class TestReceiverWaitingTimeout(CodemodTest):
    TRANSFORM = ReceiverWaitingTimeout

    def test_status_read_with_conclude_state_and_log(self) -> None:
        # poll() keeps its verdict in conclude_state and reads check_status() into a local;
        # the module has a logger and the env registry; the manager records no failures
        before = """
            import logging
            import time

            from sglang.srt.environ import envs

            logger = logging.getLogger(__name__)


            class ToyReceiver(BaseKVReceiver):
                def __init__(self, manager, room=None):
                    self.kv_mgr = manager
                    self.bootstrap_room = room
                    self.conclude_state = None

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)

                def poll(self):
                    settled = self.conclude_state
                    if settled is not None:
                        return settled
                    polled = self.kv_mgr.check_status(self.bootstrap_room)
                    if polled in (KVPoll.Success, KVPoll.Failed):
                        self.conclude_state = polled
                    return polled
        """
        after = """
            import logging
            import time

            from sglang.srt.environ import envs

            logger = logging.getLogger(__name__)


            class ToyReceiver(BaseKVReceiver):
                def __init__(self, manager, room=None):
                    # pdguard: receiver-waiting-timeout: set when the KV indices are sent.
                    self.init_time = None
                    self.waiting_timeout = envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get()
                    self.kv_mgr = manager
                    self.bootstrap_room = room
                    self.conclude_state = None

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)
                    # pdguard: receiver-waiting-timeout: the waiting timeout counts from here.
                    self.init_time = time.time()

                def poll(self):
                    settled = self.conclude_state
                    if settled is not None:
                        return settled
                    polled = self.kv_mgr.check_status(self.bootstrap_room)
                    # pdguard: receiver-waiting-timeout
                    if polled not in (KVPoll.Success, KVPoll.Failed) and self.init_time is not None:
                        elapsed = time.time() - self.init_time
                        if elapsed >= self.waiting_timeout:
                            logger.warning_once(
                                "Requests timed out waiting for their KV cache after "
                                "sending their KV indices to prefill. If a longer time "
                                "to first token is acceptable, raise the timeout: "
                                "'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600'."
                            )
                            self.conclude_state = KVPoll.Failed
                            return KVPoll.Failed
                    if polled in (KVPoll.Success, KVPoll.Failed):
                        self.conclude_state = polled
                    return polled
        """
        self.assertCodemod(
            before,
            after,
            class_name="ToyReceiver",
            check="status",
            timeout_setting="envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get()",
            record_failure=False,
        )

    def test_returned_status_is_split_and_time_imported(self) -> None:
        # poll() returns check_status() directly, no conclude_state; the manager records
        # failures, so the expired branch hands it the reason
        before = """
            import os


            class ToyReceiver(BaseKVReceiver):
                def __init__(self, manager, room=None):
                    \"\"\"A receiver.\"\"\"
                    self.kv_mgr = manager
                    self.bootstrap_room = room

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)

                def poll(self):
                    return self.kv_mgr.check_status(self.bootstrap_room)
        """
        after = """
            import os
            import time


            class ToyReceiver(BaseKVReceiver):
                def __init__(self, manager, room=None):
                    \"\"\"A receiver.\"\"\"
                    # pdguard: receiver-waiting-timeout: set when the KV indices are sent.
                    self.init_time = None
                    self.waiting_timeout = int(
                        os.environ.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "300")
                    )
                    self.kv_mgr = manager
                    self.bootstrap_room = room

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)
                    # pdguard: receiver-waiting-timeout: the waiting timeout counts from here.
                    self.init_time = time.time()

                def poll(self):
                    status = self.kv_mgr.check_status(self.bootstrap_room)
                    # pdguard: receiver-waiting-timeout
                    if status not in (KVPoll.Success, KVPoll.Failed) and self.init_time is not None:
                        elapsed = time.time() - self.init_time
                        if elapsed >= self.waiting_timeout:
                            reason = (
                                f"Request {self.bootstrap_room} timed out after {elapsed:.1f}s"
                                " waiting for its KV cache"
                            )
                            self.kv_mgr.record_failure(self.bootstrap_room, reason)
                            return KVPoll.Failed
                    return status
        """
        self.assertCodemod(
            before,
            after,
            class_name="ToyReceiver",
            check="status",
            conclude_state=False,
            log=False,
        )

    def test_record_log_and_conclude_state_in_order(self) -> None:
        """All three at once: the expired branch builds the reason, logs it, records it with
        the manager, keeps Failed in conclude_state, and only then reports Failed."""
        import ast

        code = """
            import logging
            import time

            logger = logging.getLogger(__name__)


            class ToyReceiver(BaseKVReceiver):
                def __init__(self, manager, room=None):
                    self.kv_mgr = manager
                    self.bootstrap_room = room
                    self.conclude_state = None

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)

                def poll(self):
                    if self.conclude_state is None:
                        fresh = self.kv_mgr.check_status(self.bootstrap_room)
                        if fresh in (KVPoll.Success, KVPoll.Failed):
                            self.conclude_state = fresh
                        return fresh
                    return self.conclude_state
        """
        module = cst.parse_module(textwrap.dedent(code))
        patched = ReceiverWaitingTimeout(
            CodemodContext(), class_name="ToyReceiver", check="status"
        ).transform_module(module)
        expired = next(
            node
            for node in ast.walk(ast.parse(patched.code))
            if isinstance(node, ast.If)
            and ast.unparse(node.test) == "elapsed >= self.waiting_timeout"
        )
        steps = [ast.unparse(step) for step in expired.body]
        assert steps[0].startswith("reason = f'Request {self.bootstrap_room} timed out")
        assert [step.split("(")[0] for step in steps[1:]] == [
            "logger.warning_once",
            "self.kv_mgr.record_failure",
            "self.conclude_state = KVPoll.Failed",
            "return KVPoll.Failed",
        ]
        assert "record_failure(self.bootstrap_room, reason)" in steps[2]

    def test_nixl_final_return(self) -> None:
        # the check goes before the final non-terminal return; the receiver keeps its outcome
        # under a name of its own, so the codemod stores nothing (conclude_state=False)
        before = """
            import time


            class ToyChunkReceiver(CommonKVReceiver):
                def __init__(self, manager, room=None):
                    self.indices_sent = False
                    self.outcome = None
                    super().__init__(manager, room)

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)
                    self.indices_sent = True

                def poll(self):
                    if self.outcome is None and self.indices_sent:
                        if self.kv_mgr.check_transfer_done(self.bootstrap_room):
                            self.outcome = KVPoll.Success
                    if self.outcome is not None:
                        return self.outcome
                    return KVPoll.WaitingForInput
        """
        after = """
            import time


            class ToyChunkReceiver(CommonKVReceiver):
                def __init__(self, manager, room=None):
                    # pdguard: receiver-waiting-timeout: set when the KV indices are sent.
                    self.init_time = None
                    self.waiting_timeout = 300
                    self.indices_sent = False
                    self.outcome = None
                    super().__init__(manager, room)

                def init(self, kv_indices, aux_index=None):
                    self.push_indices(kv_indices)
                    self.indices_sent = True
                    # pdguard: receiver-waiting-timeout: the waiting timeout counts from here.
                    self.init_time = time.time()

                def poll(self):
                    if self.outcome is None and self.indices_sent:
                        if self.kv_mgr.check_transfer_done(self.bootstrap_room):
                            self.outcome = KVPoll.Success
                    if self.outcome is not None:
                        return self.outcome
                    # pdguard: receiver-waiting-timeout
                    if self.init_time is not None:
                        elapsed = time.time() - self.init_time
                        if elapsed >= self.waiting_timeout:
                            return KVPoll.Failed
                    return KVPoll.WaitingForInput
        """
        self.assertCodemod(
            before,
            after,
            class_name="ToyChunkReceiver",
            check="final",
            timeout_setting="300",
            record_failure=False,
            conclude_state=False,
            log=False,
        )

    def test_final_check_needs_a_non_terminal_return(self) -> None:
        code = """
            class ToyChunkReceiver(BaseKVReceiver):
                def __init__(self):
                    self.x = 1

                def init(self, kv_indices):
                    pass

                def poll(self):
                    return KVPoll.Success
        """
        module = cst.parse_module(textwrap.dedent(code))
        with pytest.raises(AnchorError, match="non-terminal"):
            ReceiverWaitingTimeout(
                CodemodContext(), class_name="ToyChunkReceiver", check="final"
            ).transform_module(module)


class TestNixlHeartbeatRooms(CodemodTest):
    TRANSFORM = NixlHeartbeatRooms

    def test_every_tracked_room_fails_with_its_prefill(self) -> None:
        # the three places 0.5.6 changed, in a manager and receiver of our own
        before = """
            class ToyManager(CommonKVManager):
                def _start_heartbeat_checker_thread(self):
                    def probe_all():
                        for addr in self.watched:
                            if self.ping(addr):
                                self.heartbeat_failures[addr] = 0
                                for room in list(self.addr_to_rooms_tracker[addr]):
                                    if room not in self.transfer_statuses:
                                        self.addr_to_rooms_tracker[addr].discard(room)
                            else:
                                self.heartbeat_failures[addr] += 1

                def _handle_node_failure(self, addr):
                    lost = []
                    for room in self.addr_to_rooms_tracker.pop(addr, ()):
                        if (
                            room in self.transfer_statuses
                            and not self.transfer_statuses[room].is_done()
                        ):
                            self.transfer_statuses[room].num_kvs_expected = -1
                            lost.append(room)


            class ToyChunkReceiver(CommonKVReceiver):
                def poll(self):
                    room = self.bootstrap_room
                    if self.kv_mgr.check_transfer_done(room):
                        self.kv_mgr.transfer_statuses.pop(room)
                        return KVPoll.Success
                    return KVPoll.WaitingForInput
        """
        after = """
            class ToyManager(CommonKVManager):
                def _start_heartbeat_checker_thread(self):
                    def probe_all():
                        for addr in self.watched:
                            if self.ping(addr):
                                # pdguard: receiver-waiting-timeout: a healthy
                                # probe keeps every tracked room; poll() drops
                                # it once its transfer is done (as in 0.5.6).
                                self.heartbeat_failures[addr] = 0
                            else:
                                self.heartbeat_failures[addr] += 1

                def _handle_node_failure(self, addr):
                    lost = []
                    for room in self.addr_to_rooms_tracker.pop(addr, ()):
                        # pdguard: receiver-waiting-timeout: also a room no chunk reached yet
                        if not self.transfer_statuses[room].is_done():
                            self.transfer_statuses[room].num_kvs_expected = -1
                            lost.append(room)


            class ToyChunkReceiver(CommonKVReceiver):
                def poll(self):
                    room = self.bootstrap_room
                    if self.kv_mgr.check_transfer_done(room):
                        # pdguard: receiver-waiting-timeout: untracked once done.
                        self.kv_mgr.addr_to_rooms_tracker[self.bootstrap_addr].discard(
                            self.bootstrap_room
                        )
                        self.kv_mgr.transfer_statuses.pop(room)
                        return KVPoll.Success
                    return KVPoll.WaitingForInput
        """
        self.assertCodemod(
            before, after, manager_class="ToyManager", receiver_class="ToyChunkReceiver"
        )


_PENDING_BEFORE = """
    import logging
    import time

    from sglang.srt.environ import envs

    logger = logging.getLogger(__name__)


    class ToyPreallocQueue:
        def _resolve_pending_reqs(self) -> None:
            unresolved = []
            for decode_req in self.pending_reqs:
                rank = self.lookup(decode_req)
                if rank is None:
                    unresolved.append(decode_req)
                else:
                    decode_req.kv_receiver.init(rank)
            self.pending_reqs = unresolved


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            self.waiting_queue += self.disagg_decode_prealloc_queue.resume_retracted_reqs()
            if self.disagg_decode_prealloc_queue.retracted_queue:
                return
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
            self.waiting_queue += self.disagg_decode_transfer_queue.pop_transferred()
"""

_PENDING_AFTER = """
    import logging
    import time

    from sglang.srt.environ import envs

    logger = logging.getLogger(__name__)


    class ToyPreallocQueue:
        def _resolve_pending_reqs(self) -> None:
            unresolved = []
            for decode_req in self.pending_reqs:
                rank = self.lookup(decode_req)
                if rank is None:
                    # pdguard: decode-queue-bound: bounded wait for the DP rank.
                    if getattr(decode_req, "pending_since", None) is None:
                        decode_req.pending_since = time.monotonic()
                    pending_waited = time.monotonic() - decode_req.pending_since
                    pending_limit = envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get()
                    if pending_waited > pending_limit:
                        logger.error(
                            f"Request {decode_req.req.rid}: prefill DP rank"
                            f" not resolved in {pending_waited:.0f}s"
                        )
                        if decode_req.kv_receiver is not None:
                            decode_req.kv_receiver.abort()
                    else:
                        unresolved.append(decode_req)
                else:
                    decode_req.kv_receiver.init(rank)
            self.pending_reqs = unresolved


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            self.waiting_queue += self.disagg_decode_prealloc_queue.resume_retracted_reqs()
            # pdguard: decode-queue-bound: while retracted requests wait for memory,
            # admit no new request (as the early return did), but still poll the
            # transfer queue: its failures, timeouts and aborts free their KV.
            retracted_waiting = self.disagg_decode_prealloc_queue.retracted_queue
            # pdguard: decode-queue-bound: not while retracted requests wait
            if not retracted_waiting:
                admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
                self.disagg_decode_transfer_queue.extend(admitted)
            self.waiting_queue += self.disagg_decode_transfer_queue.pop_transferred()
"""

_POLL_BEFORE = """
    class ToyPreallocQueue:
        def _resolve_pending_reqs(self):
            self.pending_reqs = [r for r in self.pending_reqs if not self.resolved(r)]

        def _update_handshake_waiters(self):
            self.reduce_and_mark_failures()

        def pop_preallocated(self):
            self._resolve_pending_reqs()
            self.rounds_polled += 1
            self._update_handshake_waiters()
            gone = set()
            for i, entry in enumerate(self.queue):
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    self.scheduler.stream_output([entry.req], entry.req.return_logprob)
                    gone.add(i)
            self.queue = [e for i, e in enumerate(self.queue) if i not in gone]
            return self.admit()


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            if self.disagg_decode_prealloc_queue.retracted_queue:
                return
            admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)
"""

_POLL_AFTER = '''
    class ToyPreallocQueue:
        def _resolve_pending_reqs(self):
            self.pending_reqs = [r for r in self.pending_reqs if not self.resolved(r)]

        def _update_handshake_waiters(self):
            self.reduce_and_mark_failures()

        def poll_pending_reqs(self):
            """Resolve and bound the pending requests while retracted requests wait for memory.

            pop_preallocated() is not called then (no new request is admitted), nor with it the
            pending requests' bound and the delivery of the failures it makes: this runs them,
            with the same arguments (under PP, the stages' consensus). It allocates no KV.
            Returns the failed requests.
            """
            # pdguard: decode-queue-bound: on every step, before the retraction gate
            if not self.retracted_queue:
                return []  # pop_preallocated() resolves and polls them
            self._resolve_pending_reqs()
            self.rounds_polled += 1
            self._update_handshake_waiters()
            failed_reqs = []
            for entry in self.queue:
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    self.scheduler.stream_output([entry.req], entry.req.return_logprob)
                    failed_reqs.append(entry)
            if failed_reqs:
                failed_ids = {id(r) for r in failed_reqs}
                self.queue = [r for r in self.queue if id(r) not in failed_ids]
                self.pending_reqs = [
                    r for r in self.pending_reqs if id(r) not in failed_ids
                ]
            return failed_reqs

        def pop_preallocated(self):
            self._resolve_pending_reqs()
            self.rounds_polled += 1
            self._update_handshake_waiters()
            gone = set()
            for i, entry in enumerate(self.queue):
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    self.scheduler.stream_output([entry.req], entry.req.return_logprob)
                    gone.add(i)
            self.queue = [e for i, e in enumerate(self.queue) if i not in gone]
            return self.admit()


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            # pdguard: decode-queue-bound: while retracted requests wait, pending requests
            # are still resolved and bounded, and failures delivered (none is admitted).
            self.disagg_decode_prealloc_queue.poll_pending_reqs()
            # pdguard: decode-queue-bound: while retracted requests wait for memory,
            # admit no new request (as the early return did), but still poll the
            # transfer queue: its failures, timeouts and aborts free their KV.
            retracted_waiting = self.disagg_decode_prealloc_queue.retracted_queue
            # pdguard: decode-queue-bound: not while retracted requests wait
            if not retracted_waiting:
                admitted = self.disagg_decode_prealloc_queue.pop_preallocated()
                self.disagg_decode_transfer_queue.extend(admitted)
'''
_POLL_SPEC = "ToyPreallocQueue:pending_reqs:_resolve_pending_reqs"

_PP_BEFORE = '''
    class ToyPreallocQueue:
        def _resolve_pending_reqs(self):
            self.pending_reqs = [r for r in self.pending_reqs if not self.resolved(r)]

        def _update_handshake_waiters(self, rids=None, good=None, bad=None):
            self.mark_failures(rids, good, bad)

        def pop_preallocated(
            self,
            rids_to_check: list[str] | None = None,
            pp_good_rids: list[str] | None = None,
            pp_bad_rids: list[str] | None = None,
        ) -> Tuple[List[ToyRequest], List[ToyRequest]]:
            """Pop the admitted requests."""
            is_pp_mode = self.pp_size > 1
            self.rounds_polled += 1
            self._resolve_pending_reqs()
            self._update_handshake_waiters(rids_to_check, pp_good_rids, pp_bad_rids)
            if is_pp_mode:
                rids_to_check = {*pp_good_rids, *pp_bad_rids}
            failed, gone = [], set()
            for i, entry in enumerate(self.queue):
                if rids_to_check is not None and entry.req.rid not in rids_to_check:
                    continue
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    entry.kv_receiver.clear()
                    failed.append(entry)
                    gone.add(i)
            self.queue = [e for i, e in enumerate(self.queue) if i not in gone]
            return self.admit(), failed


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            if self.disagg_decode_prealloc_queue.retracted_queue:
                return
            admitted, _ = self.disagg_decode_prealloc_queue.pop_preallocated()
            self.disagg_decode_transfer_queue.extend(admitted)


    class ToyPPScheduler:
        def process_prealloc_queue(self, prealloc_rids):
            if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
                # retracted requests wait: admit none
                return [[], []]

            if prealloc_rids is not None:
                good_rids, bad_rids = prealloc_rids
                good_reqs, failed_reqs = self.disagg_decode_prealloc_queue.pop_preallocated(
                    pp_good_rids=good_rids, pp_bad_rids=bad_rids
                )
                self.disagg_decode_transfer_queue.extend(good_reqs)
                return [[r.req.rid for r in good_reqs], [r.req.rid for r in failed_reqs]]
            return None
'''

_PP_AFTER = '''
    class ToyPreallocQueue:
        def _resolve_pending_reqs(self):
            self.pending_reqs = [r for r in self.pending_reqs if not self.resolved(r)]

        def _update_handshake_waiters(self, rids=None, good=None, bad=None):
            self.mark_failures(rids, good, bad)

        def poll_pending_reqs(
            self,
            rids_to_check: list[str] | None = None,
            pp_good_rids: list[str] | None = None,
            pp_bad_rids: list[str] | None = None,
        ) -> List[ToyRequest]:
            """Resolve and bound the pending requests while retracted requests wait for memory.

            pop_preallocated() is not called then (no new request is admitted), nor with it the
            pending requests' bound and the delivery of the failures it makes: this runs them,
            with the same arguments (under PP, the stages' consensus). It allocates no KV.
            Returns the failed requests.
            """
            # pdguard: decode-queue-bound: on every step, before the retraction gate
            if not self.retracted_queue:
                return []  # pop_preallocated() resolves and polls them
            is_pp_mode = self.pp_size > 1
            self.rounds_polled += 1
            self._resolve_pending_reqs()
            self._update_handshake_waiters(rids_to_check, pp_good_rids, pp_bad_rids)
            if is_pp_mode:
                rids_to_check = {*pp_good_rids, *pp_bad_rids}
            failed_reqs = []
            for entry in self.queue:
                if rids_to_check is not None and entry.req.rid not in rids_to_check:
                    continue
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    entry.kv_receiver.clear()
                    failed_reqs.append(entry)
            if failed_reqs:
                failed_ids = {id(r) for r in failed_reqs}
                self.queue = [r for r in self.queue if id(r) not in failed_ids]
                self.pending_reqs = [
                    r for r in self.pending_reqs if id(r) not in failed_ids
                ]
            return failed_reqs

        def pop_preallocated(
            self,
            rids_to_check: list[str] | None = None,
            pp_good_rids: list[str] | None = None,
            pp_bad_rids: list[str] | None = None,
        ) -> Tuple[List[ToyRequest], List[ToyRequest]]:
            """Pop the admitted requests."""
            is_pp_mode = self.pp_size > 1
            self.rounds_polled += 1
            self._resolve_pending_reqs()
            self._update_handshake_waiters(rids_to_check, pp_good_rids, pp_bad_rids)
            if is_pp_mode:
                rids_to_check = {*pp_good_rids, *pp_bad_rids}
            failed, gone = [], set()
            for i, entry in enumerate(self.queue):
                if rids_to_check is not None and entry.req.rid not in rids_to_check:
                    continue
                if isinstance(entry.req.finished_reason, FINISH_ABORT):
                    entry.kv_receiver.clear()
                    failed.append(entry)
                    gone.add(i)
            self.queue = [e for i, e in enumerate(self.queue) if i not in gone]
            return self.admit(), failed


    class ToyDecodeScheduler:
        def process_decode_queue(self):
            # pdguard: decode-queue-bound: while retracted requests wait, pending requests
            # are still resolved and bounded, and failures delivered (none is admitted).
            self.disagg_decode_prealloc_queue.poll_pending_reqs()
            # pdguard: decode-queue-bound: while retracted requests wait for memory,
            # admit no new request (as the early return did), but still poll the
            # transfer queue: its failures, timeouts and aborts free their KV.
            retracted_waiting = self.disagg_decode_prealloc_queue.retracted_queue
            # pdguard: decode-queue-bound: not while retracted requests wait
            if not retracted_waiting:
                admitted, _ = self.disagg_decode_prealloc_queue.pop_preallocated()
                self.disagg_decode_transfer_queue.extend(admitted)


    class ToyPPScheduler:
        def process_prealloc_queue(self, prealloc_rids):
            # pdguard: decode-queue-bound: while retracted requests wait, pending requests
            # are still resolved and bounded, and the failures the stages agreed on delivered
            # (none is admitted); the next stage fails the same ones.
            pending_failed_reqs = []
            if prealloc_rids is not None:
                good_rids, bad_rids = prealloc_rids
                pending_failed_reqs = self.disagg_decode_prealloc_queue.poll_pending_reqs(
                    pp_good_rids=good_rids, pp_bad_rids=bad_rids
                )
            if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
                # retracted requests wait: admit none
                return [[], [r.req.rid for r in pending_failed_reqs]]

            if prealloc_rids is not None:
                good_rids, bad_rids = prealloc_rids
                good_reqs, failed_reqs = self.disagg_decode_prealloc_queue.pop_preallocated(
                    pp_good_rids=good_rids, pp_bad_rids=bad_rids
                )
                self.disagg_decode_transfer_queue.extend(good_reqs)
                return [[r.req.rid for r in good_reqs], [r.req.rid for r in failed_reqs]]
            return None
'''


class TestDecodeQueueBound(CodemodTest):
    TRANSFORM = DecodeQueueBound

    def test_pending_and_gate(self) -> None:
        self.assertCodemod(
            _PENDING_BEFORE,
            _PENDING_AFTER,
            pending=["ToyPreallocQueue._resolve_pending_reqs:unresolved:decode_req"],
            gate="ToyDecodeScheduler.process_decode_queue",
        )

    def test_pending_requests_are_polled_before_the_gate(self) -> None:
        """The pending list's resolution (its bound) and the delivery of failures run on
        every step, before the gate; the release's own failed branch delivers them, without
        its index bookkeeping. A second run changes nothing."""
        gate = "ToyDecodeScheduler.process_decode_queue"
        self.assertCodemod(_POLL_BEFORE, _POLL_AFTER, gate=gate, poll_pending=_POLL_SPEC)
        with pytest.raises(AnchorError, match="already has a method poll_pending_reqs"):
            DecodeQueueBound(CodemodContext(), gate=gate, poll_pending=_POLL_SPEC).transform_module(
                cst.parse_module(textwrap.dedent(_POLL_AFTER))
            )

    def test_the_pp_loop_polls_pending_requests_with_its_consensus(self) -> None:
        """poll_pending_reqs takes pop_preallocated()'s parameters and runs its first statements
        (the PP consensus with them) and its loop's skips; the PP loop calls it before its gate
        with the arguments it gives pop_preallocated(), under the same `if`, and its gate
        returns the rids of what it failed, as the admission block does."""
        self.assertCodemod(
            _PP_BEFORE,
            _PP_AFTER,
            gate="ToyDecodeScheduler.process_decode_queue",
            poll_pending=_POLL_SPEC,
            pp_gates=["ToyPPScheduler.process_prealloc_queue"],
        )

    def test_the_pp_loop_must_return_the_failed_rids(self) -> None:
        module = cst.parse_module(
            textwrap.dedent(_PP_BEFORE).replace("return [[], []]", "return None")
        )
        with pytest.raises(AnchorError, match="do not return"):
            DecodeQueueBound(
                CodemodContext(), pp_gates=["ToyPPScheduler.process_prealloc_queue"]
            ).transform_module(module)

    def test_poll_pending_needs_the_release_s_handshake_poll(self) -> None:
        module = cst.parse_module(
            textwrap.dedent(_POLL_BEFORE).replace("_update_handshake_waiters", "_other")
        )
        with pytest.raises(AnchorError, match="_update_handshake_waiters"):
            DecodeQueueBound(
                CodemodContext(),
                gate="ToyDecodeScheduler.process_decode_queue",
                poll_pending=_POLL_SPEC,
            ).transform_module(module)

    def test_the_stamp_is_a_field_of_the_entries_dataclass(self) -> None:
        # _PENDING_BEFORE's entries as a @dataclass of the module, in Optional[...] style
        header = "    from sglang.srt.environ import envs\n"
        dataclass_imports = (
            "    from dataclasses import dataclass\n    from typing import Optional\n\n"
        )
        entries = (
            "\n\n    @dataclass\n"
            "    class ToyDecodeRequest:\n"
            "        req: object\n"
            "        kv_receiver: Optional[object] = None\n"
        )
        field = (
            "        # pdguard: decode-queue-bound: when it was first put back\n"
            "        pending_since: Optional[float] = None\n"
        )
        logger = "    logger = logging.getLogger(__name__)\n"
        before = _PENDING_BEFORE.replace(header, dataclass_imports + header).replace(
            logger, logger + entries
        )
        after = (
            _PENDING_AFTER.replace(header, dataclass_imports + header)
            .replace(logger, logger + entries + field)
            .replace(
                'if getattr(decode_req, "pending_since", None) is None:',
                "if decode_req.pending_since is None:",
            )
        )
        assert before.count("class ToyDecodeRequest") == after.count("pending_since: ") == 1
        self.assertCodemod(
            before,
            after,
            pending=["ToyPreallocQueue._resolve_pending_reqs:unresolved:decode_req"],
            gate="ToyDecodeScheduler.process_decode_queue",
            fields=["ToyDecodeRequest"],
        )
        # once declared, a second run adds no second field
        self.assertCodemod(after, after, fields=["ToyDecodeRequest"])

    def test_the_field_follows_the_dataclass_annotation_style(self) -> None:
        before = """
    from dataclasses import dataclass


    @dataclass
    class ToyDecodeRequest:
        req: object
        kv_receiver: object | None = None
"""
        after = before + "        # pdguard: decode-queue-bound: when it was first put back\n"
        after += "        pending_since: float | None = None\n"
        self.assertCodemod(before, after, fields=["ToyDecodeRequest"])

    def test_a_deeper_admission_is_laid_out_as_black_does(self) -> None:
        before = """
            class ToyDecodeScheduler:
                def process_decode_queue(self):
                    if len(self.disagg_decode_prealloc_queue.retracted_queue) > 0:
                        return
                    if self.polling:
                        if self.threshold:
                            if self.deeper:
                                admitted, _ = self.disagg_decode_prealloc_queue.pop_preallocated()
                                self.disagg_decode_transfer_queue.extend(admitted)
                        self.disagg_decode_transfer_queue.pop_transferred()
        """
        after = """
            class ToyDecodeScheduler:
                def process_decode_queue(self):
                    # pdguard: decode-queue-bound: while retracted requests wait for memory,
                    # admit no new request (as the early return did), but still poll the
                    # transfer queue: its failures, timeouts and aborts free their KV.
                    retracted_waiting = len(self.disagg_decode_prealloc_queue.retracted_queue) > 0
                    if self.polling:
                        if self.threshold:
                            if self.deeper:
                                # pdguard: decode-queue-bound: not while retracted requests wait
                                if not retracted_waiting:
                                    admitted, _ = (
                                        self.disagg_decode_prealloc_queue.pop_preallocated()
                                    )
                                    self.disagg_decode_transfer_queue.extend(admitted)
                        self.disagg_decode_transfer_queue.pop_transferred()
        """
        self.assertCodemod(before, after, gate="ToyDecodeScheduler.process_decode_queue")

    def test_refuses_without_the_gate(self) -> None:
        module = cst.parse_module(
            textwrap.dedent(
                """
                class ToyDecodeScheduler:
                    def process_decode_queue(self):
                        self.disagg_decode_transfer_queue.pop_transferred()
                """
            )
        )
        with pytest.raises(AnchorError, match="retracted"):
            DecodeQueueBound(
                CodemodContext(), gate="ToyDecodeScheduler.process_decode_queue"
            ).transform_module(module)

    def test_refuses_two_requeues(self) -> None:
        module = cst.parse_module(
            textwrap.dedent(
                """
                import time


                class ToyPreallocQueue:
                    def _resolve_pending_reqs(self):
                        again = []
                        for waiting in self.pending_reqs:
                            again.append(waiting)  # re-queued twice: which one to bound?
                            again.append(waiting)
                """
            )
        )
        with pytest.raises(AnchorError, match="expected one"):
            DecodeQueueBound(
                CodemodContext(),
                pending=["ToyPreallocQueue._resolve_pending_reqs:again:waiting"],
            ).transform_module(module)


# -- the patched release code, executed -----------------------------------------------------
# The rules prove the fixes statically; these run the release's own patched methods (loaded
# with ``ast``, without its imports) against stand-ins, on a clock the test moves.


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def _patched(version: str) -> dict[str, str]:
    from pdguard.commands.apply import plan
    from pdguard.tree import open_tree

    result = plan(open_tree(fetch_release(version)))
    return {rel: new.text for rel, new in result.changes.items()}


def _load_class(text: str, name: str, namespace: dict, *, whole: bool = False) -> type:
    """Class ``name`` of ``text``, with its methods only (no bases, no decorators), compiled
    in ``namespace``; ``whole``: as written (a dataclass)."""
    import __future__

    import ast

    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    if not whole:
        methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
        for method in methods:
            method.decorator_list = []
        cls.body, cls.bases, cls.keywords, cls.decorator_list = methods, [], [], []
    module = ast.Module(body=[cls], type_ignores=[])
    flags = __future__.annotations.compiler_flag
    exec(compile(module, name, "exec", flags=flags, dont_inherit=True), namespace)
    return namespace[name]


class _KVPoll:
    Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


class _Logger:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, message: str, *args: object) -> None:
        self.errors.append(message)

    info = warning = warning_once = debug = error


NIXL = "sglang/srt/disaggregation/nixl/conn.py"
DECODE = "sglang/srt/disaggregation/decode.py"


@pytest.mark.releases
def test_patched_nixl_receiver_times_out_and_heartbeat_fails_unstarted_rooms() -> None:
    """NIXL 0.5.3: the patched poll() fails a transfer after the waiting timeout and keeps
    saying so; the patched heartbeat fails a tracked room no chunk reached yet."""
    import dataclasses
    import threading
    from collections import defaultdict
    from typing import Optional

    text = _patched("0.5.3")[NIXL]
    clock, logger = _Clock(), _Logger()
    namespace: dict = {"KVPoll": _KVPoll, "time": clock, "logger": logger}
    namespace.update(dataclasses=dataclasses, Optional=Optional, Set=set)
    receiver_cls = _load_class(text, "NixlKVReceiver", namespace)
    status_cls = _load_class(text, "TransferStatus", namespace, whole=True)
    manager_cls = _load_class(text, "NixlKVManager", namespace)

    failures: list[tuple[int, str]] = []
    manager = object.__new__(manager_cls)
    manager.transfer_statuses = defaultdict(status_cls)
    manager.addr_to_rooms_tracker = defaultdict(set)
    manager.connection_lock = threading.Lock()
    manager.connection_pool = {}
    manager.prefill_tp_size_table = {}
    manager.prefill_attn_tp_size_table = {}
    manager.prefill_dp_size_table = {}
    manager.prefill_pp_size_table = {}
    manager.update_transfer_status = lambda: None
    manager.record_failure = lambda room, reason: failures.append((room, reason))
    manager.waiting_timeout = 300  # read once, in the manager's decode branch

    def receiver(room: int):  # as init() leaves it: indices sent, clock started
        r = object.__new__(receiver_cls)
        r.kv_mgr, r.bootstrap_room, r.bootstrap_addr = manager, room, "prefill:8998"
        r.conclude_state, r.started_transfer = None, True
        r.init_time, r.waiting_timeout = clock.now, 300
        manager.addr_to_rooms_tracker[r.bootstrap_addr].add(room)
        return r

    wedged = receiver(7)
    clock.now += 299
    assert wedged.poll() == _KVPoll.WaitingForInput
    clock.now += 1
    assert wedged.poll() == _KVPoll.Failed
    assert wedged.conclude_state == _KVPoll.Failed and wedged.poll() == _KVPoll.Failed
    assert failures and failures[0][0] == 7 and "timed out after 300.0s" in failures[0][1]

    # The prefill dies before the first chunk of room 8 arrived.
    unstarted = receiver(8)
    manager._handle_node_failure("prefill:8998")
    assert unstarted.poll() == _KVPoll.Failed  # long before the waiting timeout
    assert 8 not in manager.transfer_statuses  # poll() consumed the failure


def _decode_mixin(text: str, namespace: dict):
    return _load_class(text, "SchedulerDisaggregationDecodeMixin", namespace)


class _Queue:
    def __init__(self, retracted: int) -> None:
        self.retracted_queue = ["retracted"] * retracted
        self.calls: list[str] = []

    def resume_retracted_reqs(self) -> list:
        self.calls.append("resume")
        return []

    def pop_preallocated(self, *args: object):
        self.calls.append("pop_preallocated")
        return ([], []) if self.returns_pair else []

    def pop_transferred(self, *args: object) -> list:
        self.calls.append("pop_transferred")
        return ["finished"]

    def extend(self, reqs: list) -> None:
        self.calls.append("extend")

    def resolve_deferred_releases(self) -> None:
        pass

    def poll_pending_reqs(self) -> None:
        self.calls.append("poll_pending_reqs")


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.4.8", "0.5.23"])
def test_patched_retraction_gate_polls_transfers_but_admits_nothing(version: str) -> None:
    from types import SimpleNamespace
    from unittest import mock

    text = _patched(version)[DECODE]
    settings = SimpleNamespace(
        disaggregation_decode_enable_offload_kvcache=False,
        disaggregation_decode_polling_interval=1,
        disaggregation_decode_host_receive_threshold=1,
    )
    mixin = _decode_mixin(text, {"get_disagg": lambda: settings})
    for retracted, admitted in ((1, False), (0, True)):
        scheduler = mock.MagicMock()
        prealloc, transfer = _Queue(retracted), _Queue(0)
        prealloc.returns_pair = transfer.returns_pair = version != "0.4.8"
        scheduler.disagg_decode_prealloc_queue = prealloc
        scheduler.disagg_decode_transfer_queue = transfer
        scheduler.enable_decode_hicache = scheduler.enable_hisparse = False
        scheduler.server_args.disaggregation_decode_enable_offload_kvcache = False
        scheduler.server_args.disaggregation_decode_polling_interval = 1
        scheduler.waiting_queue = []
        del scheduler.polling_count  # hasattr() is False, as on a fresh scheduler
        mixin.process_decode_queue(scheduler)
        assert ("pop_preallocated" in prealloc.calls) == admitted, (retracted, prealloc.calls)
        # 0.5.10+: the pending requests' bound runs on every step, before the gate
        assert prealloc.calls.count("poll_pending_reqs") == (version != "0.4.8"), prealloc.calls
        if version != "0.4.8" and admitted:
            assert prealloc.calls.index("poll_pending_reqs") < prealloc.calls.index(
                "pop_preallocated"
            )
        assert transfer.calls.count("pop_transferred") == 1, transfer.calls
        assert scheduler.waiting_queue == ["finished"]


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.5.10", "0.5.14", "0.5.23"])
def test_patched_pending_requeue_fails_after_the_timeout(version: str) -> None:
    from types import SimpleNamespace
    from unittest import mock

    text = _patched(version)[DECODE]
    clock, logger = _Clock(), _Logger()
    environ = SimpleNamespace(
        SGLANG_DISAGGREGATION_WAITING_TIMEOUT=SimpleNamespace(get=lambda: 300)
    )
    receiver = mock.MagicMock()
    query = mock.MagicMock(return_value={})  # the prefill never registers the room
    namespace = {
        "time": clock,
        "logger": logger,
        "envs": environ,
        "_bootstrap_addr": lambda req: "prefill:8998",
        "CommonKVReceiver": SimpleNamespace(query_prefill_dp_ranks=query),
    }
    queue_cls = _load_class(text, "DecodePreallocQueue", namespace)
    queue = object.__new__(queue_cls)
    # the stamp is a declared field of the DecodeRequest @dataclass, None until stamped
    declared = [
        stmt
        for cls in ast.parse(text).body
        if isinstance(cls, ast.ClassDef) and cls.name == "DecodeRequest"
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == "pending_since"
    ]
    assert [
        (ast.unparse(f.annotation), ast.unparse(f.value or ast.Constant(...))) for f in declared
    ] == [("Optional[float]", "None")]
    assert 'getattr(decode_req, "pending_since"' not in text
    decode_req = SimpleNamespace(
        req=SimpleNamespace(rid="r1", bootstrap_room=42), kv_receiver=receiver, pending_since=None
    )
    queue.pending_reqs = [decode_req]
    queue._ensure_prefill_info = lambda addr_to_reqs: (dict(addr_to_reqs), [])
    queue._resolve_prefill_dp_rank = lambda req: None
    queue._prefill_dp_rank_queries = {}
    queue._cancel_prefill_dp_rank_queries = lambda: None

    for _ in range(3):  # re-queued while the bound has not passed
        queue._resolve_pending_reqs()
        assert queue.pending_reqs == [decode_req] and not receiver.abort.called
        clock.now += 100
    clock.now += 1
    queue._resolve_pending_reqs()
    assert queue.pending_reqs == [] and receiver.abort.call_count == 1
    assert logger.errors and "r1" in logger.errors[-1] and "not resolved" in logger.errors[-1]


@pytest.mark.releases
def test_unpatched_code_shows_the_wedges_these_tests_catch() -> None:
    """The same stand-ins on unpatched 0.5.23 and 0.5.3: the gate polls nothing while a
    request is retracted, and NIXL's receiver waits on after any timeout."""
    from types import SimpleNamespace
    from unittest import mock

    settings = SimpleNamespace(
        disaggregation_decode_enable_offload_kvcache=False,
        disaggregation_decode_polling_interval=1,
        disaggregation_decode_host_receive_threshold=1,
    )
    text = (fetch_release("0.5.23") / DECODE).read_text()
    mixin = _decode_mixin(text, {"get_disagg": lambda: settings})
    scheduler = mock.MagicMock()
    scheduler.disagg_decode_prealloc_queue, scheduler.disagg_decode_transfer_queue = (
        _Queue(1),
        _Queue(0),
    )
    mixin.process_decode_queue(scheduler)
    assert scheduler.disagg_decode_transfer_queue.calls == []

    clock = _Clock()
    namespace = {"KVPoll": _KVPoll, "time": clock, "logger": _Logger()}
    receiver_cls = _load_class(
        (fetch_release("0.5.3") / NIXL).read_text(), "NixlKVReceiver", namespace
    )
    receiver = object.__new__(receiver_cls)
    receiver.kv_mgr = mock.MagicMock()
    receiver.kv_mgr.check_transfer_done.return_value = False
    receiver.bootstrap_room, receiver.conclude_state, receiver.started_transfer = 7, None, True
    clock.now += 10_000
    assert receiver.poll() == _KVPoll.WaitingForInput


def _before_poll_pending(text: str) -> str:
    """``text`` patched as pdguard did before ``poll_pending_reqs``: the pending bound in
    ``_resolve_pending_reqs`` only (the method and its call, with its comment, taken out)."""
    start = text.index("    def poll_pending_reqs(")
    text = text[:start] + text[text.index("    def pop_preallocated(", start) :]
    call = "        self.disagg_decode_prealloc_queue.poll_pending_reqs()\n"
    end = text.index(call) + len(call)
    start = text.rindex(
        "        # pdguard: decode-queue-bound: while retracted requests wait", 0, end
    )
    return text[:start] + text[end:]


@pytest.mark.releases
def test_a_tree_patched_before_poll_pending_is_reported_and_repaired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.5.14 patched by the previous version: PDG007 reports the pending bound behind the
    gate, apply refuses naming --repair, and --repair gives the bytes of a fresh apply."""
    from tests.helpers import patched_copy

    root = patched_copy("0.5.14", tmp_path / "0.5.14")
    fresh = (root / DECODE).read_text()
    (root / DECODE).write_text(_before_poll_pending(fresh))
    code, report = _json(capsys, "check", str(root), "--select", "PDG007", "--format", "json")
    assert code == 1
    assert {(f["symbol"], f["message"].split(":")[0]) for f in report["findings"]} == {
        (
            "DecodePreallocQueue._resolve_pending_reqs",
            "a request put back into self.pending_reqs (rebuilt by _resolve_pending_reqs) is "
            "bounded only where the polling functions call it behind the retraction gate",
        )
    }
    code, report = _json(capsys, "apply", str(root), "--format", "json")
    assert code == 2 and report["fixes"]["decode-queue-bound"] == "refused"
    assert "`pdguard apply --repair`" in report["notes"]["decode-queue-bound"]
    assert main(["apply", "--repair", str(root)]) == 0
    assert (root / DECODE).read_text() == fresh


PP_MIXIN = "sglang/srt/managers/scheduler_pp_mixin.py"


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_the_pp_decode_loop_is_bounded_too(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a whole package (the PP mixin outside disaggregation/): apply patches both decode
    loops, black/isort/ruff-clean and idempotent, and check passes; the non-PP loop's call
    without the PP loop's is a PDG007 finding naming the PP loop, which apply refuses (naming
    --repair), never reporting success check rejects."""
    root = tmp_path / version
    shutil.copytree(fetch_release(version, full=True) / "sglang", root / "sglang")
    for path in root.rglob("*.py"):
        path.chmod(0o644)
    before = {rel: (root / rel).read_text() for rel in (DECODE, PP_MIXIN)}
    code, report = _json(
        capsys,
        "apply",
        str(root),
        "--select",
        "decode-queue-bound",
        "--no-confirm",
        "--format",
        "json",
    )
    assert code == 0 and report["fixes"]["decode-queue-bound"] == "applied", report
    assert sorted(report["files_changed"]) == [str(root / DECODE), str(root / PP_MIXIN)]
    for rel, old in before.items():
        new = (root / rel).read_text()
        assert black_complaints(old, new) == [], rel
        assert isort_complaints(old, new) == [], rel
        original = tmp_path / "original.py"
        original.write_text(old)
        assert ruff_findings(root / rel) == ruff_findings(original), rel
    mixin = (root / PP_MIXIN).read_text()
    assert mixin.count(".poll_pending_reqs(") == 1
    assert "return [[], [req.req.rid for req in pending_failed_reqs]]" in mixin
    after = {rel: (root / rel).read_text() for rel in before}
    code, again = _json(
        capsys, "apply", str(root), "--select", "decode-queue-bound", "--format", "json"
    )
    assert code == 0 and again["files_changed"] == []
    assert {rel: (root / rel).read_text() for rel in before} == after
    assert main(["check", str(root), "--select", "PDG007"]) == 0
    capsys.readouterr()

    (root / PP_MIXIN).write_text(before[PP_MIXIN])  # the non-PP loop's call only
    code, found = _json(capsys, "check", str(root), "--select", "PDG007", "--format", "json")
    assert code == 1
    assert [f["message"].rsplit("(", 1)[-1] for f in found["findings"]] == [
        "reached only behind the gate from SchedulerPPMixin.process_prealloc_queue)"
    ]
    code, refused = _json(
        capsys, "apply", str(root), "--select", "decode-queue-bound", "--format", "json"
    )
    assert code == 2 and refused["fixes"]["decode-queue-bound"] == "refused"


def test_poll_pending_hollows_pop_preallocated_but_what_it_copies() -> None:
    """Only the statements ``poll_pending_reqs`` copies from ``pop_preallocated()`` (up to its
    handshake poll, its loop up to the ``FINISH_ABORT`` branch) are parsed with LibCST; its
    allocation is a hole, and the bytes are the whole module's."""
    from pdguard.codemods.holes import hollow
    from pdguard.codemods.runner import transform
    from pdguard.run import Run

    allocation = "".join(f"            self.allocate(step={n})\n" for n in range(6))
    text = textwrap.dedent(
        _POLL_BEFORE.replace(
            "            return self.admit()\n", allocation + "            return self.admit()\n"
        )
    )
    gate = "ToyDecodeScheduler.process_decode_queue"
    run = Run()
    command = DecodeQueueBound(
        CodemodContext(scratch={"pdguard.run": run}), gate=gate, poll_pending=_POLL_SPEC
    )
    hollowed = hollow(text, command.scope(text), by_content=True, run=run)
    assert hollowed is not None
    holes = "".join(original for _, _, original in hollowed.holes.values())
    assert textwrap.dedent(allocation) in textwrap.dedent(holes)
    for copied in ("self.rounds_polled += 1", "stream_output"):
        assert copied in hollowed.text and copied not in holes
    results = [
        transform(
            each,
            "decode.py",
            text,
            [
                DecodeQueueBound(
                    CodemodContext(scratch={"pdguard.run": each}),
                    gate=gate,
                    poll_pending=_POLL_SPEC,
                )
            ],
        )
        for each in (Run(hollow=True), Run(hollow=False))
    ]
    assert results[0] == results[1]
    assert results[0][0] and "def poll_pending_reqs(self):" in results[0][1]
