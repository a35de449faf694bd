"""What a person at a terminal sees: colour (on a TTY; ``NO_COLOR`` turns it off,
``FORCE_COLOR`` on, as https://no-color.org and https://force-color.org say), the width text
reports wrap to on a terminal (in a pipe or a file a finding stays one line, for grep and
editors), and whether a progress line may be drawn (stderr is a TTY)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

# Text reports wrap here when no terminal says otherwise (``COLUMNS`` is honoured).
DEFAULT_WIDTH = 100
MIN_WIDTH = 60
INDENT = "    "  # a wrapped message's continuation lines

BOLD, RED, GREEN, YELLOW, CYAN = "1", "31", "32", "33", "36"


def colour(stream: TextIO | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (default stdout)."""
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return is_tty(sys.stdout if stream is None else stream) and os.environ.get("TERM") != "dumb"


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, *codes: str, enabled: bool = True) -> str:
    return f"\x1b[{';'.join(codes)}m{text}\x1b[0m" if enabled and codes else text


def width() -> int:
    """The width text reports wrap to: the terminal's (or ``COLUMNS``), else 100."""
    columns = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return max(MIN_WIDTH, columns)


def wrap(first: str, message: str, columns: int | None = None) -> list[str]:
    """``first`` followed by ``message``, wrapped; continuation lines are indented, so that the
    first line still starts ``path:line:col: CODE`` (editors and grep read that)."""
    lines = textwrap.wrap(
        message,
        width=columns or width(),
        initial_indent=first,
        subsequent_indent=INDENT,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [first.rstrip()]


_QUIET: ContextVar[bool] = ContextVar("pdguard_quiet", default=False)


@contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """No progress while this runs (``-q``)."""
    token = _QUIET.set(enabled)
    try:
        yield
    finally:
        _QUIET.reset(token)


def quiet_now() -> bool:
    return _QUIET.get()


def progress_wanted() -> bool:
    """A progress line is drawn on stderr when stderr is a terminal (whatever stdout is: a
    report piped or redirected still shows its progress), unless ``-q``."""
    return not _QUIET.get() and is_tty(sys.stderr)
