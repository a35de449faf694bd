"""PDG004: a KV sender can stay in Bootstrapping forever.

What it does
    For every subclass of ``BaseKVSender`` in the tree (resolved through inheritance across
    files, and through the helper methods its ``poll()`` calls), reports a sender whose
    ``poll()`` can return ``KVPoll.Bootstrapping`` while no bootstrap timeout can fire:
    ``init_time`` is never a time before or during Bootstrapping (never set, only ``None``, or
    set only in ``init()``; a clock started at the first ``poll()`` counts, one restarted on
    every ``poll()`` does not), or ``poll()`` never reaches a timeout check. A check is a test
    of the time since ``init_time`` (or since a clock of the sender's own, read at
    construction) that reports Failed when it expires (returns it, concludes it, sets the
    room's status to it; a test that only logs or raises does not), made before every
    ``return`` of ``poll()`` that can report Bootstrapping. A sender whose poll can never
    return Bootstrapping is not reported.

Why is this bad
    While a sender reports Bootstrapping its request waits in the prefill bootstrap queue. If
    decode never sends its KV indices (it restarted, or the router dropped the decode leg),
    only ``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` frees it. NIXL's sender had none before
    SGLang 0.5.18; Mooncake's 0.4.7 - 0.4.8 started the clock only in ``init()``, after
    Bootstrapping.

Example
    A NIXL sender as in 0.5.13 - 0.5.17 (``CommonKVSender.__init__`` sets ``init_time = None``
    and ``poll()`` returns ``kv_mgr.check_status()`` unchecked) is reported; in short:

    ```python
    class NixlKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr = mgr
            self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

        def poll(self):
            status = self.kv_mgr.check_status(self.room)
            return status
    ```

Use instead
    Start the clock at construction, and fail the sender once the bootstrap timeout passed:

    ```python
    class NixlKVSender(BaseKVSender):
        def __init__(self, mgr, room):
            self.kv_mgr = mgr
            self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
            self.init_time = time.time()

        def poll(self):
            status = self.kv_mgr.check_status(self.room)
            if status == KVPoll.Bootstrapping:
                if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                    return KVPoll.Failed
            return status
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from ..project import Project
from ..rule import Finding, Rule


class SenderBootstrappingForever(Rule):
    code = "PDG004"
    name = "sender-bootstrapping-forever"

    def check(self, project: Project) -> Iterator[Finding]:
        index = project.classes
        for name in index.senders():
            facts = index.facts(name)
            if facts.healthy or index.opaque_poll(name) is not None:  # PDG000 says why
                continue
            problems = []
            if facts.init_time_flag:
                problems.append(
                    f"init_time decides what poll() reports (line {facts.init_time_flag}): it "
                    "is a state flag there, not a clock"
                )
            if facts.restamp:
                problems.append(
                    f"poll() restarts init_time on every call (line {facts.restamp}): the time "
                    "since it never grows"
                )
            if facts.init_time != "time":
                problems.append(
                    "init_time is never set to a time before or during Bootstrapping"
                    if facts.init_time == "unset"
                    else "init_time is None while Bootstrapping (set only later, if at all)"
                )
            if facts.unchecked_return[0]:
                returned, first = facts.unchecked_return
                problems.append(
                    f"poll() can return the room's status (line {returned}) before the "
                    f"bootstrap timeout is tested (line {first}): that path reports "
                    "Bootstrapping unchecked"
                    if first
                    else f"poll() can return the room's status (line {returned}) while the "
                    "bootstrap timeout is tested only in other states"
                )
            if not facts.check_reached and facts.inert_why == "gated":
                problems.append(
                    f"poll() tests the time since init_time (line {facts.inert_check}) only in "
                    "another state than Bootstrapping"
                )
            elif not facts.check_reached and facts.inert_check:
                problems.append(
                    f"poll()'s test of the time since init_time (line {facts.inert_check}) "
                    "reports no Failed when the timeout expires"
                    + (
                        ": it raises, and an exception out of poll() stops the scheduler's "
                        "poll loop, not just this request"
                        if facts.inert_why == "raises"
                        else ""
                    )
                )
            elif not facts.check_reached:
                problems.append(
                    "poll() never compares the time since init_time with a bootstrap timeout"
                )
            info = index.classes[name]
            owner = facts.poll_owner if facts.poll_owner is not None else info
            node = owner.methods.get("poll", info.node) if owner is info else info.node
            yield self.finding(
                info.rel,
                node.lineno,
                node.col_offset + 1,
                f"{name}.poll",
                f"{name} can stay in Bootstrapping forever: " + "; ".join(problems),
            )
