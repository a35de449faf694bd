"""PDG006: a KV receiver can wait forever once its KV indices were sent to the prefill.

What it does
    For every subclass of ``BaseKVReceiver`` in the tree (resolved through inheritance across
    files, and through the helper methods its ``poll()`` calls) whose ``poll`` and
    index-sending methods are implemented, runs the receiver's life abstractly: the
    constructor, then ``init()`` and ``send_metadata()`` (the calls that hand the KV indices to
    the prefill), then ``poll()``. Reports a receiver whose ``poll()`` can then still return a
    non-terminal ``KVPoll`` (WaitingForInput, Bootstrapping, Transferring, or a status read
    from its manager) on a path that passed no waiting timeout that can fire: an elapsed time
    since a clock stamp that is set by then, compared with a limit, whose expired side fails
    the request (returns ``KVPoll.Failed`` or stores it, also through ``abort()``). It says so
    when ``poll()`` has no path that returns Failed at all. A receiver that is always terminal
    once the indices were sent (``FakeKVReceiver``) is not reported. An elapsed time is two
    readings of one clock (a ``time.time()`` stamp read on ``time.monotonic()`` never reaches
    the limit). Also reports a timeout whose clock was already running before the indices were
    sent (started in ``__init__``, in ``init()`` where ``send_metadata()`` sends them, or by
    ``poll()`` itself on its first call or when it first sees WaitingForInput: the prealloc
    queue polls the receiver before the indices go out): it bounds the wait, but also fails
    requests that only wait in the prealloc queue for decode memory. The check is followed
    by meaning: inline or in a helper that returns the test, on a scaled elapsed time
    (nanoseconds to milliseconds) or the time left before a deadline, in ``if`` or
    ``match``/``case`` on the status. And reports a receiver whose manager, on losing a
    prefill (its heartbeat's ``_handle_node_failure``), fails a tracked room only when the
    room is in a table that the receiver's own constructor and index-sending methods never
    fill (NIXL 0.5.3 - 0.5.5.post3: ``room in self.transfer_statuses``, filled only once a
    chunk arrived). A receiver with an open return that gives what a call pdguard cannot
    follow returned (a dispatch table's handler) is left to PDG000.

Why is this bad
    After the indices were sent the request sits in the decode transfer queue, holding its KV
    pages, a request slot and a metadata buffer, until the receiver reports Success or Failed.
    If the prefill dies, restarts, or drops the request (a client abort, its own bootstrap
    timeout, pdguard's inflight deadline), no release tells the decode; only
    ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` frees it. Mooncake had none before 0.4.9.post1
    and NIXL before 0.5.6: their stuck requests pile up until the decode admits nothing. A
    clock started earlier would also fail a request that waits only for decode memory, which
    is back-pressure, not a dead peer (upstream starts it where the indices are sent;
    sgl-project/sglang#21477, which moved it to the constructor, was closed unmerged). A
    heartbeat that skips the rooms no chunk reached leaves them to the waiting timeout (or to
    nothing, where there is none) although the prefill is known to be gone.

Example
    A NIXL receiver as in 0.4.8.post1 - 0.5.2: ``poll()`` returns WaitingForInput until the
    transfer is done, and has no clock and no Failed path.

    ```python
    def poll(self):
        if self.indices_out and self.kv_mgr.check_transfer_done():
            return KVPoll.Success
        return KVPoll.WaitingForInput
    ```

Use instead
    Stamp the receiver where its indices are sent, and fail it once the waiting timeout
    passed with no terminal status:

    ```python
    def init(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.room, kv_indices)
        self.init_time = time.time()


    def poll(self):
        if self.conclude_state is not None:  # Success or Failed, kept
            return self.conclude_state
        current = self.kv_mgr.check_status(self.room)
        if current in (KVPoll.Success, KVPoll.Failed):
            self.conclude_state = current
        elif current == KVPoll.WaitingForInput and self.init_time is not None:
            if time.time() - self.init_time > TIMEOUT:
                self.conclude_state = KVPoll.Failed
                return KVPoll.Failed
        return current
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from pdguard.sglang_names import (
    HANDLE_NODE_FAILURE,
)

from ..project import Project
from ..rule import Finding, Rule


class ReceiverWaitsForever(Rule):
    code = "PDG006"
    name = "receiver-waits-forever"

    def check(self, project: Project) -> Iterator[Finding]:
        receivers = project.receivers
        for name in receivers.concrete():
            verdict = receivers.verdict(name)
            if not verdict.violates or verdict.opaque:  # PDG000 says it cannot tell
                continue
            problems = []
            if verdict.waits_forever:
                states = ", ".join(sorted(verdict.uncovered))
                problems.append(f"poll() can return {states} with no waiting timeout that can fire")
            if not verdict.returns_failed:
                problems.append("poll() never returns Failed")
            if verdict.early_clock:
                problems.append(
                    "its waiting timeout counts from before the indices were sent, so it also "
                    "fails requests that only wait for decode memory"
                )
            if verdict.heartbeat_gap is not None:
                manager, table = verdict.heartbeat_gap
                problems.append(
                    f"when its prefill is lost, {manager}.{HANDLE_NODE_FAILURE}() fails a "
                    f"tracked room only if it is in self.{table}, which the receiver never "
                    "fills for its room: a room no chunk reached yet is not failed"
                )
            if verdict.waits_forever:
                what = f"{name} can wait forever after its KV indices were sent to the prefill"
            elif verdict.early_clock:
                what = f"{name} bounds its wait for the prefill on the wrong clock"
            else:
                what = f"{name} is not failed when its prefill is lost"
            info = receivers.index.classes[name]
            owner = receivers.index.resolve(name, "poll")
            node = owner.methods["poll"] if owner is info else info.node
            yield self.finding(
                info.rel,
                node.lineno,
                node.col_offset + 1,
                f"{name}.poll",
                f"{what}: " + "; ".join(problems),
            )
