"""Inline suppressions: ``# pdguard: ignore[PDG001, PDG004]`` or a bare ``# pdguard: ignore``.

Only the exact form suppresses. A comment that starts like a suppression but is not one
(``ignore[PDG001`` unclosed, ``ignore(PDG001)``, ``ignore=PDG001``, ``ignore: PDG001``,
``ignored``), or that names a code no rule has (``[PDG04]``, ``[PDG999]``), suppresses nothing
and gives a warning, as ruff does for a malformed ``# noqa``: a typo must never widen a
suppression, nor silently do nothing.

Only real comments count (found with ``tokenize``), not text inside strings. pdguard's own
marker comments (``# pdguard: inflight-deadline``) are neither suppressions nor warned about.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

_PREFIX = re.compile(r"#\s*pdguard:\s*", re.I)
_SEGMENT = re.compile(r"#\s*pdguard:", re.I)
_IGNORE = re.compile(r"ignore(?P<tail>.*)$", re.I | re.S)
_CODES = re.compile(r"\[\s*(?P<codes>[A-Za-z]+\d+(?:\s*,\s*[A-Za-z]+\d+)*)\s*\]")
# What may follow a suppression: nothing, or another comment after whitespace.
_END = re.compile(r"\s*$|\s+#")
EXACT_FORMS = "`# pdguard: ignore[CODE, ...]` or `# pdguard: ignore`"


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


def _comments(text: str) -> Iterable[tuple[int, int, str]]:
    """(line, col, comment) for each comment in ``text``."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.start[1], token.string
    except (tokenize.TokenError, SyntaxError):
        return  # a file that does not tokenize is reported as a parse error elsewhere


def _segments(text: str) -> Iterable[tuple[int, int, str]]:
    """Each ``# pdguard:`` part of each comment, also after another tool's comment on the same
    line (``# noqa: E501  # pdguard: ignore[PDG001]``): (line, col, the comment from there)."""
    for line, col, comment in _comments(text):
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


def parse(text: str, known: Collection[str]) -> Suppressions:
    """The suppressions in ``text``; ``known`` are the rule codes that exist."""
    found = Suppressions()
    if "pdguard" not in text.lower():
        return found  # the usual case: no pdguard comment at all
    for line, col, comment in _segments(text):
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
