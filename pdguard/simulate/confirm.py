"""Confirmation: the scenarios as the second witness of the static verdict (``check
--confirm``, ``apply``'s re-check, ``verify --confirm``).

Per side of the tree (prefill, decode), the static verdict is whether a liveness rule reports
it and the simulated verdict whether a scenario of that side fails. Where they agree, nothing
is added. Where they disagree, a PDG009 finding carries both witnesses: the static finding (or
the rules that found nothing) and the scenario (its observed text, or the passing scenarios).
Where the code cannot be run (a LoadError or SimulationGap, one line), there is no second
witness: the reason is kept (``Confirmation.why_not``) for the command to show, and the static
verdict stands.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import LoadError, SimulationGap
from ..sglang_names import DECODE_PATH, INFLIGHT_FUNCTION, PREFILL_PATH
from ..tree import SourceTree
from . import DECODE_SCENARIOS, NAMES, Row, SimulationReport
from . import run as simulate

if TYPE_CHECKING:
    from pdguard.checks.project import Project

CODE = "PDG009"
PROCESS_DECODE_QUEUE = "process_decode_queue"


@dataclass(frozen=True)
class Side:
    """One side of the tree: the rules that judge it statically and its scenarios."""

    name: str
    path: str
    function: str  # where a disagreement is placed
    codes: frozenset[str]
    scenarios: frozenset[str]
    primary: str  # the rule of the side's queue (the fix that proves it answers for the side)


# decode scenarios that run the prefill's half too (the pair of deadlines) judge both sides
_PAIRS = frozenset(s.name for s in DECODE_SCENARIOS if s.prefill is not None)
SIDES = (
    Side(
        "prefill",
        PREFILL_PATH,
        INFLIGHT_FUNCTION,
        frozenset({"PDG001", "PDG002", "PDG003", "PDG004", "PDG008"}),
        frozenset(NAMES) | _PAIRS,
        "PDG001",
    ),
    Side(
        "decode",
        DECODE_PATH,
        PROCESS_DECODE_QUEUE,
        frozenset({"PDG006", "PDG007"}),
        frozenset(s.name for s in DECODE_SCENARIOS) - _PAIRS,
        "PDG007",
    ),
)
# every rule a side's static verdict reads
STATIC_CODES = frozenset().union(*(side.codes for side in SIDES))


@dataclass(frozen=True)
class Confirmation:
    """The simulation of one tree, or why it could not run."""

    report: SimulationReport | None
    why_not: str | None = None

    def rows(self, side: Side) -> list[Row]:
        if self.report is None:
            return []
        return [row for row in self.report.rows if row.scenario in side.scenarios]


def confirm(tree: SourceTree, ranks: int = 2) -> Confirmation:
    """Run every scenario that applies to ``tree`` (in the sandbox): each side the tree has,
    the one that can run even where the other cannot (that side's reason is kept)."""
    try:
        report = simulate(tree, ranks=ranks, keep_going=True)
    except (LoadError, SimulationGap) as exc:
        return Confirmation(None, str(exc))
    unrun = "; ".join(f"the {side} side: {why}" for side, why in report.cannot_run.items())
    return Confirmation(report, unrun or None)


@dataclass(frozen=True)
class Disagreement:
    path: str
    line: int
    col: int
    symbol: str
    message: str


def _anchor(module: ast.Module | None, function: str) -> tuple[int, int]:
    """The line and column of ``def <function>`` (1, 1 when there is none)."""
    if module is not None:
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef) and node.name == function:
                return node.lineno, node.col_offset + 1
    return 1, 1


def _shorten(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def disagreements(
    findings: Iterable[tuple[str, int, str, str]],
    confirmation: Confirmation,
    modules: dict[str, ast.Module | None],
) -> Iterator[Disagreement]:
    """Where the static verdict (``findings``: code, line, message and file of the liveness
    rules) and the scenarios disagree, side by side. ``modules``: each side's parsed file (or
    None). A finding in a file whose code the scenarios did not run (a fork's backend whose
    sender they do not use) is no part of what they witness."""
    if confirmation.report is None:
        return
    found: Sequence[tuple[str, int, str, str]] = list(findings)
    ran = confirmation.report.loaded.get("files")  # the prefill side's modules, as loaded
    for side in SIDES:
        rows = [row for row in confirmation.rows(side) if row.verdict != "n/a"]
        if not rows:
            continue
        static = [
            f
            for f in found
            if f[0] in side.codes
            and (side.name != "prefill" or not isinstance(ran, list) or f[3] in ran)
        ]
        failing = [row for row in rows if row.verdict == "fail"]
        lead = f"the static rules and the simulation disagree on the {side.name} side: "
        ran = "the simulation ran the tree's own code and"
        if static and not failing:
            code, at, message, _ = static[0]
            shown = next((r for r in rows if r.scenario in ("wedge", "prefill-gone")), rows[0])
            why = (
                f"{code} (line {at}) says {_shorten(message, 160)}; {ran} its {len(rows)} "
                f"{side.name} scenario(s) pass ({shown.scenario}: "
                f"{_shorten(shown.observed, 160)})"
            )
        elif failing and not static:
            row = failing[0]
            more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
            why = (
                f"{', '.join(sorted(side.codes))} report nothing; {ran} scenario "
                f"{row.scenario}{more} fails: {_shorten(row.observed)}"
            )
        else:
            continue
        line, col = _anchor(modules.get(side.path), side.function)
        yield Disagreement(side.path, line, col, side.function, lead + why)


# -- the rule's view: a Project, and the tree behind it -------------------------------------


@dataclass(frozen=True)
class TextTree(SourceTree):
    """A tree of texts by relative path (a rule's example, or a Project's texts when no tree
    on disk is attached)."""

    texts: dict[str, str]
    name: str = "<texts>"

    @property
    def label(self) -> str:
        return self.name

    def read_bytes(self, rel: str) -> bytes | None:
        text = self.texts.get(rel)
        return None if text is None else text.encode("utf-8")

    def python_files(self, rel_dir: str) -> list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        return sorted(rel for rel in self.texts if rel.startswith(prefix) and rel.endswith(".py"))

    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        return iter(())

    def display(self, rel: str) -> str:
        return rel


@dataclass(frozen=True)
class OverlayTree(SourceTree):
    """``base`` with some files replaced by new texts (what ``apply`` would write), read before
    anything is written."""

    base: SourceTree
    texts: dict[str, str]

    @property
    def label(self) -> str:
        return self.base.label

    def read_bytes(self, rel: str) -> bytes | None:
        text = self.texts.get(rel)
        return text.encode("utf-8") if text is not None else self.base.read_bytes(rel)

    def python_files(self, rel_dir: str) -> list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        new = {rel for rel in self.texts if rel.startswith(prefix) and rel.endswith(".py")}
        return sorted(set(self.base.python_files(rel_dir)) | new)

    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        return self.base.config_files(rel)

    def display(self, rel: str) -> str:
        return self.base.display(rel)


def side_of(path: str) -> Side | None:
    """The side a PDG009 finding is on."""
    return next((side for side in SIDES if side.path == path), None)


# The tree a Project was read from, where a command attached one (``attach``), and its
# confirmation, once: kept on the project itself (``Project.confirm_tree``,
# ``Project.confirmation``), so they end with it.


def attach(project: Project, tree: SourceTree) -> None:
    """Run PDG009 on ``project`` against ``tree`` (every file of it, not only the rules')."""
    project.confirm_tree = tree


def confirmation_of(project: Project, texts: dict[str, str]) -> Confirmation:
    if project.confirmation is None:
        project.confirmation = confirm(project.confirm_tree or TextTree(dict(texts)))
    found: Confirmation = project.confirmation
    return found


def why_not_confirmed(project: Project) -> str | None:
    """Why PDG009 could not run ``project``'s tree (None: it ran, or was not asked to)."""
    found: Confirmation | None = project.confirmation
    return found.why_not if found is not None else None
