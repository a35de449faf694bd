"""PDG008: the inflight deadline aborts a KV sender whose poll() does not report Failed then.

What it does
    Where the inflight deadline fails overdue senders with ``abort()`` (before the poll
    all-reduce), reports every concrete ``BaseKVSender`` subclass (resolved through inheritance
    across files) whose ``poll()`` does not report Failed once ``abort()`` has run: it has no
    ``abort()`` at all, or its ``abort()`` concludes a Failed state (or a Failed room status)
    that ``poll()`` never returns (``checks/models/kv_senders.py``, ``abort_honoured``).

Why is this bad
    The deadline counts on the MIN-reduced poll being Failed on every rank in the step it
    aborts the sender: only then does the release's own Failed branch end the request on all
    of them. An ``abort()`` that ``poll()`` ignores (NIXL up to 0.5.11 reads its transfer
    handles once it has sent) leaves the overdue request waiting, with no bound; a sender
    without ``abort()`` makes the call raise. The fix belongs in the sender's class (pdguard's
    ``sender-abort``), not in a ``poll`` replaced on the instance (PDG002).

Example
    ``abort()`` concludes a Failed state that ``poll()`` never returns (NIXL up to 0.5.11
    reads its transfer handles once it has sent):

    ```python
    class QuillKVSender(SharedKVSender):
        ...

        def poll(self):
            if not self.handles:
                return self.kv_mgr.check_status(self.room)
            return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
    ```

Use instead
    Return the concluded state first (``sender-abort`` writes this, as 0.5.12+ does):

    ```python
    class QuillKVSender(SharedKVSender):
        ...

        def poll(self):
            if self.conclude_state is not None:
                return self.conclude_state
            if not self.handles:
                return self.kv_mgr.check_status(self.room)
            return KVPoll.Success if self.kv_mgr.done(self.handles) else KVPoll.Transferring
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from ..project import Project
from ..rule import Finding, Rule

# What a deadline may call on a sender besides abort() without failing it another way:
# record_failure adds a reason, poll() reads the state (PP: is the transfer still unfinished).
ABORT_ONLY = frozenset({"abort", "record_failure", "poll"})


class AbortIgnored(Rule):
    code = "PDG008"
    name = "abort-ignored"

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        # deadlines that fail senders with abort() alone (record_failure only adds a reason;
        # a poll set on the instance, which PDG002 reports, or another call may fail it)
        aborting = [
            c
            for c in model.checks
            if c.each_step
            and c.fails_sender
            and c.poll_set_at is None
            and "abort" in c.sender_calls
            and c.sender_calls <= ABORT_ONLY
        ]
        if not aborting:
            return
        index = project.classes
        for name in index.senders():
            if not index.is_concrete(name) or index.abort_honoured(name):
                continue
            if index.opaque_poll(name) is not None:
                continue  # PDG000: pdguard cannot read what poll() does
            owner = index.resolve(name, "poll")
            abort_owner = index.resolve(name, "abort")
            if owner is None:
                continue
            poll = owner.methods["poll"]
            marks = index.abort_marks(name)
            if abort_owner is None:
                why = "it has no abort()"
            elif index.abort_concludes(name) or not marks:
                why = f"it never returns the state {abort_owner.name}.abort() concludes"
            else:
                # abort() marks the sender some other way (``self.cancelled = True``)
                set_ = ", ".join(f"self.{m}" for m in marks)
                why = (
                    f"its first statement does not return Failed once {abort_owner.name}."
                    f"abort() has set {set_}"
                )
            yield self.finding(
                owner.rel,
                poll.lineno,
                poll.col_offset + 1,
                f"{name}.poll",
                f"{name}.poll() does not report Failed once abort() has run ({why}), and the "
                f"inflight deadline fails senders with abort() (line {aborting[0].line}): its "
                "requests can wait forever",
            )
