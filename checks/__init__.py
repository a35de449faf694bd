"""pdguard's rules: one module each, with its rationale and VALID/INVALID examples.

Rules read a ``Project`` (the files that can matter, parsed with ``ast``) and yield
``Finding``s; they never open files.

``RULES`` is the one registry: ``check``'s ``--select``/``--ignore``, its help, SARIF's rule
metadata and the tests read it. Adding a rule: its module (a ``Rule`` subclass with ``code``,
``name``, a docstring whose title is its one-line summary, and ``VALID``/``INVALID``
examples) and one line here.
"""

from __future__ import annotations

from collections.abc import Iterable

from .project import Project
from .rule import Finding, Rule
from .rules.pdg000_unmodelled import Unmodelled
from .rules.pdg001_inflight_wait_forever import InflightWaitForever
from .rules.pdg002_deadline_per_rank import DeadlinePerRank
from .rules.pdg003_deadline_clock import DeadlineClock
from .rules.pdg004_sender_bootstrapping_forever import SenderBootstrappingForever
from .rules.pdg005_unbound_name import UnboundName
from .rules.pdg006_receiver_waits_forever import ReceiverWaitsForever
from .rules.pdg007_decode_queue_waits_forever import DecodeQueueWaitsForever
from .rules.pdg008_abort_ignored import AbortIgnored
from .rules.pdg009_confirm_disagrees import ConfirmDisagrees

RULES: tuple[Rule, ...] = (
    Unmodelled(),
    InflightWaitForever(),
    DeadlinePerRank(),
    DeadlineClock(),
    SenderBootstrappingForever(),
    UnboundName(),
    ReceiverWaitsForever(),
    DecodeQueueWaitsForever(),
    AbortIgnored(),
    ConfirmDisagrees(),
)
CODES = tuple(rule.code for rule in RULES)
# PDG009 runs the tree's code (``check --confirm``): every other rule reads it only
CONFIRM_CODE = ConfirmDisagrees.code
STATIC_RULES = tuple(rule for rule in RULES if rule.code != CONFIRM_CODE)
STATIC_CODES = tuple(rule.code for rule in STATIC_RULES)


def run(project: Project, codes: Iterable[str] | None = None) -> list[Finding]:
    """Every finding of the selected rules (the static ones unless named), sorted by path and
    position."""
    selected = set(STATIC_CODES if codes is None else codes)
    return sorted(
        finding for rule in RULES if rule.code in selected for finding in rule.check(project)
    )


__all__ = [
    "CODES",
    "CONFIRM_CODE",
    "RULES",
    "STATIC_CODES",
    "STATIC_RULES",
    "Finding",
    "Project",
    "Rule",
    "run",
]
