"""PDG009: the static rules and the simulation of the tree's own code disagree.

What it does
    Runs only with ``check --confirm`` (and ``apply``'s re-check, ``verify --confirm``). Where
    the tree's code loads into ``simulate`` (in its sandbox), runs every scenario that applies
    and compares, side by side (prefill, decode), the static verdict (a finding of PDG001-004
    or PDG008; PDG006-007) with the scenarios' (a row that fails). Where one says the side is
    bounded and the other shows a request that is not (or the reverse), reports it at the
    side's function, with both witnesses: the static finding or the rules that found nothing,
    and the scenario and what it observed, or the scenarios that pass.

Why is this bad
    Either witness can be wrong: the static model can miss a path the code takes at run time
    (a wedge the rules call bounded), and it can reject a correct fix written in a style it does
    not know (one step later, a sweep at the end of the step). A disagreement is never a
    silent pass: someone reads both witnesses and decides, and suppresses the finding with a
    comment saying why (``# pdguard: ignore[PDG009]`` on the function's line).

Example
    A deadline helper called right after the poll all-reduce: PDG002 says each rank fails the
    request on its own clock, while the simulation shows every rank failing it in the same
    step, one step after the deadline (the next poll, MIN-reduced, reports Failed everywhere):

    ```python
    senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
    polls = poll_and_all_reduce(senders, self.attn_tp_cpu_group)
    self._expire_inflight()
    ```

Use instead
    Read both witnesses. Where the code is right, put the deadline where the static rules
    prove it (before the poll all-reduce) or suppress the finding with a comment saying why;
    where the scenario is right, fix the code it ran:

    ```python
    self._expire_inflight()
    senders = [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue]
    polls = poll_and_all_reduce(senders, self.attn_tp_cpu_group)
    ```
"""

from __future__ import annotations

from collections.abc import Iterator

from ..project import Project
from ..rule import PREFILL, Finding, Rule
from .pdg001_inflight_wait_forever import InflightWaitForever
from .pdg002_deadline_per_rank import DeadlinePerRank
from .pdg003_deadline_clock import DeadlineClock
from .pdg004_sender_bootstrapping_forever import SenderBootstrappingForever
from .pdg006_receiver_waits_forever import ReceiverWaitsForever
from .pdg007_decode_queue_waits_forever import DecodeQueueWaitsForever
from .pdg008_abort_ignored import AbortIgnored

# the rules whose verdict the scenarios witness (pdguard.simulate.confirm.SIDES says which side)
WITNESSED: tuple[Rule, ...] = (
    InflightWaitForever(),
    DeadlinePerRank(),
    DeadlineClock(),
    SenderBootstrappingForever(),
    AbortIgnored(),
    ReceiverWaitsForever(),
    DecodeQueueWaitsForever(),
)


class ConfirmDisagrees(Rule):
    code = "PDG009"
    name = "confirm-disagrees"

    def check(self, project: Project) -> Iterator[Finding]:
        from pdguard.simulate import confirm

        static = [
            (f.code, f.line, f.message, f.path) for rule in WITNESSED for f in rule.check(project)
        ]
        confirmation = confirm.confirmation_of(project, project.texts)
        modules = {side.path: project.tree(side.path) for side in confirm.SIDES}
        for found in confirm.disagreements(static, confirmation, modules):
            yield self.finding(found.path, found.line, found.col, found.symbol, found.message)


__all__ = ["PREFILL", "ConfirmDisagrees"]
