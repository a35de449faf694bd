"""pdguard's one error model.

A ``PdguardError`` is the user's problem or pdguard's refusal, never a bug: the command line
prints it as ONE line, ``pdguard: error: <file>[:line[:col]]: what``, and exits 2. Anything else
that escapes a command is a bug in pdguard: one line that says so and where to report it, also
exit 2, and the traceback only with ``--debug`` or ``PDGUARD_DEBUG=1``. Exit code 1 is never an
error: it means findings, or changes needed.

The messages that several places raise are built here, once: a file that does not parse
(``does_not_parse``) and a refused fix (``refusal``).
"""

from __future__ import annotations

import ast

from . import ISSUES_URL

EXIT_OK = 0  # done, nothing to do, no findings, every scenario passes
EXIT_CHANGES = 1  # findings, a change needed (--check), a fix applicable/drifted, a scenario fails
EXIT_ERROR = 2  # a PdguardError, a usage error, or a bug in pdguard
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # stdout closed early, e.g. `pdguard check . | head -1` (128 + SIGPIPE)


class PdguardError(Exception):
    """A user error or a refusal: one line on stderr, exit 2."""


class TargetError(PdguardError):
    """The target is not something pdguard can work on (not SGLang, a missing file, ...)."""


class UsageError(PdguardError):
    """Command-line arguments that do not go together (found after argparse)."""


class ConfigError(TargetError):
    """A settings file of the target (isort's, in ``pyproject.toml``, ``setup.cfg``,
    ``.isort.cfg``, ...) that cannot be read; the message names the file."""


class ParseError(TargetError):
    """A file pdguard needs does not parse (or cannot be decoded). Where the raiser knows
    them (``does_not_parse``, ``SourceDecodeError``): the file relative to the tree's base
    (``rel``), the position (1-based; 1:1 when Python gives none) and the reason (``why``),
    from which every command builds its ``E999`` diagnostic (``check.syntax_result``)."""

    rel: str | None = None
    line: int = 1
    col: int = 1
    why: str = ""


class RefusedError(PdguardError):
    """A fix pdguard will not apply to this tree; the message says why."""


class WriteError(PdguardError, OSError):
    """Nothing was written (or everything written was rolled back)."""


class LoadError(PdguardError):
    """``simulate``: the target's code cannot be loaded into the simulation."""


class SimulationGap(PdguardError):
    """``simulate``: the target's code reached something with no stand-in."""


def does_not_parse(
    where: str, exc: SyntaxError | ValueError, text: str | None = None, rel: str | None = None
) -> ParseError:
    """The one "does not parse" error: ``<where>:<line>:<col>: does not parse: <why>``.

    ``where`` names the file as the user should see it, ``rel`` relative to the tree's base.
    Python gives no position for a NUL byte (a ValueError before 3.11.4); with the file's
    ``text`` the position is found here."""
    line, col = getattr(exc, "lineno", None), getattr(exc, "offset", None)
    if not line and text is not None and "\0" in text:
        before = text[: text.index("\0")]
        line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
    why = getattr(exc, "msg", None) or str(exc)
    error = ParseError(f"{where}:{line or 0}:{col or 0}: does not parse: {why}")
    error.rel, error.line, error.col = rel, max(line or 1, 1), max(col or 1, 1)
    error.why = f"does not parse: {why}"
    error.__cause__ = exc
    return error


def parse(text: str | bytes, rel: str, where: str | None = None) -> ast.Module:
    """``ast.parse``, with a file that does not parse raised as ``does_not_parse``."""
    try:
        return ast.parse(text, filename=rel)
    except (SyntaxError, ValueError) as exc:
        shown = text if isinstance(text, str) else None
        raise does_not_parse(where or rel, exc, shown, rel) from exc


def refusal(name: str, note: str | None, where: str | None = None) -> str:
    """The one line that says a fix was refused: ``[<file>[:line]: ]<fix> refused: <why>``."""
    return f"{where + ': ' if where else ''}{name} refused: {note}"


def bug_line(exc: BaseException) -> str:
    """What an unexpected exception (a bug in pdguard) says, on one line."""
    what = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return (
        f"internal error ({what}); this is a bug in pdguard, please report it at {ISSUES_URL}"
        " (run with --debug or PDGUARD_DEBUG=1 for the traceback)"
    )
