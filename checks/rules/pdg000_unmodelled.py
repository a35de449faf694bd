"""PDG000: code pdguard cannot model, so it cannot prove the property.

What it does
    Reports, in ``prefill.py``, what stops pdguard from following requests through the
    inflight queue: ``process_disagg_prefill_inflight_queue`` missing (renamed or split), a
    function that polls or keeps requests in a way pdguard does not recognise, and a queue that
    escapes (bound to another name, passed to a function, a method pdguard does not know).
    Also reports a concrete KV sender whose ``poll()`` returns what pdguard cannot trace to
    poll states (a call it does not know, a parameter), when nothing else says whether it can
    report Bootstrapping: PDG004 could not tell. And a KV receiver whose ``poll()`` can
    return, with no timeout on the way, only what a call pdguard cannot follow gave (a handler
    from a dispatch table, a function of another module): PDG006 cannot say whether it waits
    forever. And a KV sender or receiver one of whose bases the tree does not define (a
    class imported from another package): its methods may be the ones that run.

Why is this bad
    The other rules prove that no request waits without bound *in the code they understand*.
    Where pdguard cannot follow the queue, silence would read as "all checks passed" for code
    nobody checked. This rule makes that gap visible instead: review the code by hand, then
    suppress the finding (``# pdguard: ignore[PDG000]``) with a comment saying why.

Example
    A fork that renamed the inflight function (or keeps the queue under another name, or whose
    sender's ``poll()`` returns what pdguard cannot trace) is reported, not passed:

    ```python
    def process_inflight_transfers(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
    ```

Use instead
    The name SGLang calls, or review the code by hand and suppress the finding with a reason:

    ```python
    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
    ```
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..models.inflight import FUNCTION, QUEUE
from ..project import Project
from ..rule import PREFILL, Finding, Rule


class Unmodelled(Rule):
    code = "PDG000"
    name = "unmodelled-code"

    def check(self, project: Project) -> Iterator[Finding]:
        yield from self._receivers(project)
        yield from self._inflight(project)
        yield from self._unread_senders(project)
        yield from self._unknown_bases(project)

    def _receivers(self, project: Project) -> Iterator[Finding]:
        receivers = project.receivers
        for name in receivers.concrete():
            verdict = receivers.verdict(name)
            if not verdict.opaque:
                continue
            info = receivers.index.classes[name]
            owner = receivers.index.resolve(name, "poll")
            node = owner.methods["poll"] if owner is info else info.node
            calls = ", ".join(f"`{call}()`" for call in verdict.opaque)
            yield self.finding(
                info.rel,
                node.lineno,
                node.col_offset + 1,
                f"{name}.poll",
                f"{name}.poll() can return what {calls} gives, which pdguard cannot follow: "
                "it cannot tell whether a waiting timeout bounds the wait for the prefill",
            )

    def _inflight(self, project: Project) -> Iterator[Finding]:
        tree = project.tree(PREFILL)
        if tree is None:
            return
        model = project.inflight
        if model is None:
            lines = project.texts[PREFILL].splitlines()
            line = next((n for n, text in enumerate(lines, 1) if QUEUE in text), 1)
            yield self.finding(
                PREFILL,
                line,
                1,
                "<module>",
                f"no {FUNCTION}() in prefill.py (renamed or split?): pdguard cannot model the "
                "inflight queue, so nothing proves that its requests are bounded",
            )
            return
        for gap in model.unmodelled:
            yield self.finding(PREFILL, gap.line, gap.col, model.class_name, gap.message)

    def _unknown_bases(self, project: Project) -> Iterator[Finding]:
        """A KV sender or receiver with a base class the tree does not define (imported from
        another package): its methods may be the ones that run, and none can be read."""
        receivers = project.receivers
        kinds = [
            ("sender", project.classes, project.classes.senders()),
            ("receiver", receivers.index, list(receivers.concrete())),
        ]
        seen: set[tuple[str, str]] = set()
        for kind, index, names in kinds:
            for name in names:
                for info, base in index.unknown_bases(name):
                    if (info.name, base) in seen:
                        continue
                    seen.add((info.name, base))
                    yield self.finding(
                        info.rel,
                        info.node.lineno,
                        info.node.col_offset + 1,
                        info.name,
                        f"{info.name} (the KV {kind} {name}'s ancestry) has the base {base}, "
                        "which the tree does not define: its methods (poll(), abort(), ...) may "
                        f"be the ones that run, and pdguard cannot read them to prove {name} "
                        "bounded",
                    )

    def _unread_senders(self, project: Project) -> Iterator[Finding]:
        """KV senders whose ``poll()`` returns what pdguard cannot trace to poll states, when
        nothing else says they can report Bootstrapping: PDG004 cannot tell, so it says nothing."""
        index = project.classes
        for name in index.senders():
            opaque = index.opaque_poll(name)
            if opaque is not None:
                owner, line, how = opaque
                what = (
                    "is bound to an expression, not defined"
                    if how == "poll = ..."
                    else f"is wrapped by {how}"
                )
                yield self.finding(
                    owner.rel,
                    line,
                    5,
                    f"{name}.poll",
                    f"{owner.name}.poll {what}: pdguard cannot read {name}'s poll(), so "
                    "nothing proves that its bootstrap is bounded (PDG004) or that it reports "
                    "an abort (PDG008)",
                )
                continue
            if not index.is_concrete(name) or index.facts(name).can_bootstrap:
                continue
            unread = index.unread_return(name)
            if unread is None:
                continue
            owner, node = unread
            value = ast.unparse(node.value) if node.value is not None else "None"
            yield self.finding(
                owner.rel,
                node.lineno,
                node.col_offset + 1,
                f"{name}.poll",
                f"{name}.poll() returns `{value}`, which pdguard cannot trace to poll states: it "
                "cannot tell whether this sender can report Bootstrapping, so nothing proves that "
                "its bootstrap is bounded (PDG004)",
            )
