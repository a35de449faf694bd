"""Inline suppressions: ``# pdguard: ignore[PDG001, PDG004]`` or a bare ``# pdguard: ignore``,
either followed by a reason after ``--`` (``# pdguard: ignore[PDG004] -- never deployed``).

Only the exact form suppresses. A comment that starts like a suppression but is not one
(``ignore[PDG001`` unclosed, ``ignore(PDG001)``, ``ignore=PDG001``, ``ignore: PDG001``,
``ignored``), or that names a code no rule has (``[PDG04]``, ``[PDG999]``), suppresses nothing
and gives a warning, as ruff does for a malformed ``# noqa``: a typo must never widen a
suppression, nor silently do nothing.

Only real comments count (found with ``tokenize``), not text inside strings. pdguard's own
marker comments (``# pdguard: inflight-deadline``) are neither suppressions nor warned about.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from .checks.nodes import first_line
from .checks.segments import line_starts
from .run import Run

_PREFIX = re.compile(r"#\s*pdguard:\s*", re.I)
_SEGMENT = re.compile(r"#\s*pdguard:", re.I)
_IGNORE = re.compile(r"ignore(?P<tail>.*)$", re.I | re.S)
_CODES = re.compile(r"\[\s*(?P<codes>[A-Za-z]+\d+(?:\s*,\s*[A-Za-z]+\d+)*)\s*\]")
# What may follow a suppression: nothing, another comment after whitespace, or a reason after
# ` -- ` (``# pdguard: ignore[PDG004] -- the backend is never deployed``, as ruff allows).
_END = re.compile(r"\s*$|\s+#|\s+--\s+\S")
EXACT_FORMS = "`# pdguard: ignore[CODE, ...]` or `# pdguard: ignore`, optionally `-- reason`"


@dataclass(frozen=True)
class SuppressionWarning:
    line: int
    col: int
    message: str


@dataclass
class Suppressions:
    """The suppressions of one file: line -> codes (None: every code), and the warnings."""

    by_line: dict[int, frozenset[str] | None] = field(default_factory=dict)
    warnings: list[SuppressionWarning] = field(default_factory=list)

    def suppresses(self, line: int, code: str) -> bool:
        if line not in self.by_line:
            return False
        codes = self.by_line[line]
        return codes is None or code in codes


def _comments(text: str, run: Run | None) -> Iterable[tuple[int, int, str]]:
    """(line, col, comment) for each comment in ``text`` on a line that holds ``# pdguard:``.

    A line is tokenized from the first line of the innermost statement that holds it (its
    ``ast`` position): that is where its tokens can start, and a ``#`` inside a string then
    never ends up a comment. A line between statements (a comment line, an ``else:``) is
    tokenized alone. Tokenizing the whole file is the fallback (and costs 40 ms for a
    3,500-line module, which ``apply`` re-checks after every fix)."""
    lines = line_starts(text)
    candidates = sorted(
        {bisect.bisect_right(lines, match.start()) for match in _SEGMENT.finditer(text)}
    )
    tree = _tree(text, run)
    if tree is None or "\r" in text.replace("\r\n", ""):
        yield from _all_comments(text, set(candidates))
        return
    for line in candidates:
        first = _statement_start(tree.body, line)
        chunk = text[lines[first - 1] : lines[line] if line < len(lines) else len(text)]
        found = _chunk_comments(chunk, first, line)
        if found is None:
            found = list(_all_comments(text, {line}))
        yield from found


def _tree(text: str, run: Run | None) -> ast.Module | None:
    from .checks.project import parse_module  # parsed once per text in a run: check parsed it

    try:
        return parse_module(text, "<suppressions>", run)
    except (SyntaxError, ValueError):
        return None


def _statement_start(body: Sequence[ast.stmt], line: int) -> int:
    """The first line of the innermost statement in ``body`` that holds ``line`` (decorators
    included), or ``line`` itself when it lies between statements."""
    for stmt in body:
        first = first_line(stmt)
        if line < first:
            return line
        if line <= (stmt.end_lineno or stmt.lineno):
            children = sorted(_child_statements(stmt), key=lambda s: s.lineno)
            if not children or line < children[0].lineno:
                return first  # in its header
            return _statement_start(children, line)
    return line


def _child_statements(stmt: ast.stmt) -> Iterable[ast.stmt]:
    for name in ("body", "orelse", "finalbody"):
        yield from getattr(stmt, name, [])
    for handler in getattr(stmt, "handlers", []):
        yield from handler.body
    for case in getattr(stmt, "cases", []):
        yield from case.body


def _chunk_comments(chunk: str, first: int, line: int) -> list[tuple[int, int, str]] | None:
    """The comments on ``line`` of ``chunk`` (which starts at line ``first``); None when
    ``chunk`` cannot be tokenized on its own."""
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(chunk).readline):
            if token.type == tokenize.COMMENT and token.start[0] + first - 1 == line:
                found.append((line, token.start[1], token.string))
    except tokenize.TokenError:
        pass  # EOF in a string or a bracket: what came before it was read
    except SyntaxError:  # an unindent that does not match
        return None
    return found


def _all_comments(text: str, wanted: set[int]) -> Iterable[tuple[int, int, str]]:
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.start[0] in wanted:
                yield token.start[0], token.start[1], token.string
    except (tokenize.TokenError, SyntaxError):
        return  # a file that does not tokenize is reported as a parse error elsewhere


def _segments(text: str, run: Run | None) -> Iterable[tuple[int, int, str]]:
    """Each ``# pdguard:`` part of each comment, also after another tool's comment on the same
    line (``# noqa: E501  # pdguard: ignore[PDG001]``): (line, col, the comment from there)."""
    for line, col, comment in _comments(text, run):
        for match in _SEGMENT.finditer(comment):
            yield line, col + match.start(), comment[match.start() :]


def _interpret(
    comment: str, known: Collection[str]
) -> tuple[frozenset[str] | None, str | None] | None:
    """What one pdguard comment says: (codes or None for all, warning or None); None when the
    comment is no suppression at all (a marker)."""
    prefix = _PREFIX.match(comment)
    if prefix is None:
        return None
    rest = comment[prefix.end() :]
    ignore = _IGNORE.match(rest)
    if ignore is None:
        return None  # a marker such as `# pdguard: inflight-deadline`
    tail = ignore.group("tail")
    malformed = f"malformed suppression `{comment.strip()}`: expected {EXACT_FORMS}"
    if _END.match(tail):
        return None, None  # bare: every code
    codes = _CODES.match(tail)
    if codes is None or not _END.match(tail[codes.end() :]):
        return frozenset(), malformed
    named = [c.strip().upper() for c in codes.group("codes").split(",")]
    unknown = [c for c in named if c not in known]
    if unknown:
        return frozenset(), (
            f"unknown rule code {', '.join(unknown)} in `{comment.strip()}`: "
            "this comment suppresses nothing"
        )
    return frozenset(named), None


def parse(text: str, known: Collection[str], run: Run | None = None) -> Suppressions:
    """The suppressions in ``text``; ``known`` are the rule codes that exist; ``run``: the
    run whose parsed trees are shared."""
    found = Suppressions()
    if "pdguard" not in text.lower():
        return found  # the usual case: no pdguard comment at all
    for line, col, comment in _segments(text, run):
        meaning = _interpret(comment, known)
        if meaning is None:
            continue
        codes, warning = meaning
        if warning is not None:
            found.warnings.append(SuppressionWarning(line, col + 1, warning))
            continue
        current = found.by_line.get(line, frozenset())
        if codes is None or current is None:
            found.by_line[line] = None
        else:
            found.by_line[line] = current | codes
    return found
