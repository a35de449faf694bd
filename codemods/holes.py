"""Parse with LibCST only the part of a module a transform can touch.

LibCST parses a 3,500-line ``decode.py`` in about 0.2 s, and a full pass over it costs as much
again, though the transforms edit two methods of it. A codemod that knows where it can reach
says so with a ``Scope``: the names it looks for (its anchors) and the classes it reads whole.
``hollow`` then replaces each run of statements that mentions none of them by one *hole*, a line
``__pdguard_hole_<tag>_<n>__`` at the run's indentation; the transform runs on that smaller
module, and ``Hollowed.fill`` puts every run's original lines back in its output.

What is hollowed, in a module's text (``ast`` positions):

* at module level, runs of ``def``/``class`` statements only: imports, ``logger = ...`` and
  every other module-level statement stay, as the import and naming helpers read them;
* in the body of a class that mentions an anchor (and is not kept whole), runs of any
  statements; a class that mentions none is one statement of its enclosing run;
* a function is kept whole or is part of a run, unless the scope names the functions it keeps
  whole (``functions``): the body of any other function that mentions an anchor is then
  hollowed as a class body is, and so is each block of a compound statement in it that does.

A statement *mentions* an anchor when its source lines contain the anchor's text, so a method
is kept when its name is an anchor (its ``def`` line holds it). Text that holds ``pdguard`` (a
marker of an earlier run) is always kept.

``Command.source`` gives a codemod that reads the module as text (``ast`` queries: the names
the module uses, its bindings) the text with every hole filled, so those answers are the whole
module's. ``codemods.runner`` accepts a hollowed result only when every hole is in the output
once, on a line of its own, at its indentation; otherwise, and when a codemod raises
``AnchorError`` on the hollowed module, it runs the codemods on the whole module instead. Hole
lines are plain expression statements (a ``Name``), so ``libcst.matchers`` patterns of
definitions, calls and assignments never match one.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdguard.checks.nodes import first_line
from pdguard.checks.project import parse_module

if TYPE_CHECKING:
    from pdguard.run import Run

__all__ = ["Hollowed", "Scope", "hollow"]

PREFIX = "__pdguard_hole_"
_HOLE = re.compile(r"__pdguard_hole_([0-9a-f]{12})_(\d+)__")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# A run shorter than this stays: a hole would save less than it costs to check.
_MIN_LINES = 4


@dataclass(frozen=True)
class Scope:
    """Where a transform can reach: statements that mention one of ``mentions`` or span one
    of ``lines`` (1-based), and the classes in ``classes`` whole (their name need not be in
    ``mentions``), and the methods in ``members`` (class, method) whole (their class is
    reached, the rest of its body hollowed). A reached function is kept whole when
    ``functions`` is None, else only the functions it names are (and ``members``), and the
    body of any other reached function is hollowed too.
    ``Scope()`` reaches module-level statements only. Scopes combine with ``|`` into one that
    reaches all they reach (a function kept whole by either stays whole)."""

    mentions: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()
    lines: frozenset[int] = frozenset()
    functions: frozenset[str] | None = None
    members: frozenset[tuple[str, str]] = frozenset()

    def __or__(self, other: Scope) -> Scope:
        functions = (
            None
            if self.functions is None or other.functions is None
            else self.functions | other.functions
        )
        return Scope(
            self.mentions | other.mentions,
            self.classes | other.classes,
            self.lines | other.lines,
            functions,
            self.members | other.members,
        )


@dataclass
class Hollowed:
    """A module's text with holes, and what each hole stands for."""

    text: str
    tag: str
    # hole name -> (the indentation of its line, its line ending, the original lines)
    holes: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def fill(self, code: str) -> str | None:
        """``code`` (a transform's output) with each hole's lines back; None when a hole is
        missing, repeated, moved off its own line or re-indented."""
        pieces: list[str] = []
        start = 0
        seen: set[str] = set()
        for match in _HOLE.finditer(code):
            name = match.group(0)
            if match.group(1) != self.tag or name in seen or name not in self.holes:
                return None
            indent, ending, original = self.holes[name]
            line_start = code.rfind("\n", 0, match.start()) + 1
            end = match.end() + len(ending)
            if code[line_start : match.start()] != indent or code[match.end() : end] != ending:
                return None
            if ending == "" and end != len(code):
                return None
            seen.add(name)
            pieces.append(code[start:line_start])
            pieces.append(original)
            start = end
        if seen != set(self.holes):
            return None
        pieces.append(code[start:])
        return "".join(pieces)

    def fill_present(self, code: str) -> str:
        """``code`` with the lines of each hole that is in it, as it is, put back: the text
        an ``ast`` query about the module should read (``Command.source``)."""
        for name, (indent, ending, original) in self.holes.items():
            code = code.replace(f"{indent}{name}{ending}", original, 1)
        return code


def hollow(
    text: str, scope: Scope, *, by_content: bool = False, run: Run | None = None
) -> Hollowed | None:
    """``text`` with holes for the runs ``scope`` cannot reach; None when there is none worth
    making, or the text is one pdguard does not hollow (a bare ``\\r`` line ending, or a name
    that looks like a hole).

    The holes' names carry a tag. By default it names the text and its runs, so two hollowings
    never share a name. ``by_content`` names only what the holes leave (the kept lines and
    where each hole sits): two versions of a file that differ only inside holes then hollow to
    the same text, which ``codemods.runner`` parses (and may transform) once in a ``run``
    (whose parsed trees ``hollow`` shares)."""
    if PREFIX in text or "\r" in text.replace("\r\n", ""):
        return None
    try:
        tree = parse_module(text, "<hollow>", run)
    except (SyntaxError, ValueError):
        return None
    lines = _lines(text)
    runs = _Runs(lines, scope)
    runs.block(tree.body, module_level=True)
    if not runs.found:
        return None
    # the text with every hole named under a placeholder tag, then the tag put in
    placeholder = "0" * 12
    holes: dict[str, tuple[str, str, str]] = {}
    pieces: list[str] = []
    done = 0
    for number, (first, last) in enumerate(runs.found):
        line = lines[first]
        indent = line[: len(line) - len(line.lstrip(" \t\f"))]
        ending = _ending(lines[last])
        holes[f"_{number}__"] = (indent, ending, "".join(lines[first : last + 1]))
        pieces.extend(lines[done:first])
        pieces.append(f"{indent}{PREFIX}{placeholder}_{number}__{ending}")
        done = last + 1
    pieces.extend(lines[done:])
    template = "".join(pieces)
    if by_content:
        digest = hashlib.blake2b(template.encode("utf-8", "surrogatepass"), digest_size=6)
        digest.update(b"by content")
    else:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6)
        digest.update(repr(runs.found).encode())
    tag = digest.hexdigest()
    hollowed = Hollowed(template.replace(f"{PREFIX}{placeholder}_", f"{PREFIX}{tag}_"), tag)
    hollowed.holes = {f"{PREFIX}{tag}{suffix}": hole for suffix, hole in holes.items()}
    return hollowed


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as ``ast`` numbers them (``\\n`` or ``\\r\\n``), with their
    endings."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if lines[-1] == "":
        lines.pop()
    return lines


def _ending(line: str) -> str:
    if line.endswith("\r\n"):
        return "\r\n"
    return "\n" if line.endswith("\n") else ""


class _Runs:
    """The line ranges (0-based, inclusive) of the runs to hollow, in order."""

    def __init__(self, lines: Sequence[str], scope: Scope) -> None:
        self.lines = lines
        self.scope = scope
        self.found: list[tuple[int, int]] = []
        self.member_classes = {cls for cls, _ in scope.members}
        self.scope_lines = sorted(scope.lines)

    def block(
        self,
        body: Sequence[ast.stmt],
        module_level: bool,
        in_function: bool = False,
        owner: str | None = None,
    ) -> None:
        run: list[ast.stmt] = []
        for stmt in body:
            kept = module_level and not isinstance(stmt, _DEFINITIONS)
            if not (kept or self._reached(stmt, owner)):
                run.append(stmt)
                continue
            self._close(run, body)
            run = []
            if isinstance(stmt, ast.ClassDef):
                if stmt.name not in self.scope.classes:
                    self.block(stmt.body, module_level=False, owner=stmt.name)
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                if (
                    self.scope.functions is not None
                    and stmt.name not in self.scope.functions
                    and (owner, stmt.name) not in self.scope.members
                ):
                    self.block(stmt.body, module_level=False, in_function=True)
            elif in_function:
                for inner in _blocks(stmt):
                    self.block(inner, module_level=False, in_function=True)
        self._close(run, body)

    def _reached(self, stmt: ast.stmt, owner: str | None) -> bool:
        if isinstance(stmt, ast.ClassDef) and (
            stmt.name in self.scope.classes or stmt.name in self.member_classes
        ):
            return True
        if (
            isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            and (owner, stmt.name) in self.scope.members
        ):
            return True
        first, last = first_line(stmt), _last_line(stmt)
        index = bisect.bisect_left(self.scope_lines, first)  # a line of the scope in the span
        if index < len(self.scope_lines) and self.scope_lines[index] <= last:
            return True
        source = "".join(self.lines[first - 1 : last])
        return "pdguard" in source or any(name in source for name in self.scope.mentions)

    def _close(self, run: list[ast.stmt], body: Sequence[ast.stmt]) -> None:
        if not run:
            return
        first, last = first_line(run[0]), _last_line(run[-1])
        if last - first + 1 < _MIN_LINES:
            return
        index = next(i for i, s in enumerate(body) if s is run[0])
        before = body[index - 1] if index else None
        after = body[index + len(run)] if index + len(run) < len(body) else None
        if before is not None and _last_line(before) >= first:
            return  # shares its first line with the statement before it
        if after is not None and first_line(after) <= last:
            return  # shares its last line with the statement after it
        if not self._starts_line(run[0]):
            return  # ``class A: x = 1``: not on a line of its own
        self.found.append((first - 1, last - 1))

    def _starts_line(self, stmt: ast.stmt) -> bool:
        line = self.lines[first_line(stmt) - 1]
        if _decorators(stmt):
            return line.lstrip(" \t\f").startswith("@")
        prefix = line.encode("utf-8", "surrogatepass")[: stmt.col_offset]
        return prefix.strip(b" \t\f") == b""


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists of a compound statement, in source order."""
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    return [getattr(stmt, name) for name in ("body", "orelse") if getattr(stmt, name, None)]


def _decorators(stmt: ast.stmt) -> Collection[ast.expr]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return stmt.decorator_list
    return ()


def _last_line(stmt: ast.stmt) -> int:
    end = stmt.end_lineno
    assert end is not None  # parsed from text: every statement has a position
    return end
