"""What every command module has, and the pieces they share.

A command module (``pdguard/commands/<name>.py``) defines ``NAME``, ``HELP`` (one line),
``DESCRIPTION``, ``epilog()``, ``add_arguments(parser)``, ``run(args) -> exit code`` and
``FORMATS``, its ONE output registry: format name -> renderer. The same format name
means the same thing in every command: ``text`` (for people), ``json``, ``sarif`` (SARIF 2.1.0),
``github`` (workflow annotations).

A command reports an error by raising a ``pdguard.errors.PdguardError``; the command line turns
it into one line and exit 2. Each module imports what it needs when it runs (``check`` never
loads LibCST), so building the parser stays cheap.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from ..errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, UsageError

__all__ = [
    "EXIT_CHANGES",
    "EXIT_ERROR",
    "EXIT_OK",
    "add_exit_zero",
    "add_format",
    "add_output_file",
    "emit",
    "github_escape",
    "positive",
    "relative",
]

# Old format names still accepted (not shown in --help): verify's and simulate's `table`.
DEPRECATED_FORMATS = {"table": "text"}


def add_format(
    parser: argparse.ArgumentParser, formats: Mapping[str, object], default: str = "text"
) -> None:
    """``--format``, its choices the keys of the command's output registry."""
    names = list(formats)
    aliases = {old: new for old, new in DEPRECATED_FORMATS.items() if new in formats}

    def format_name(value: str) -> str:
        return aliases.get(value, value)

    parser.add_argument(
        "--format",
        type=format_name,
        choices=names,
        default=default,
        metavar="{" + ",".join(names) + "}",
        help=f"output format (default: {default})",
    )


def add_output_file(parser: argparse.ArgumentParser, example: str = "report.json") -> None:
    """``--output-file PATH``: write the report there instead of stdout (as ruff does)."""
    parser.add_argument(
        "--output-file",
        "-o",
        metavar="PATH",
        help=f"write the report to PATH instead of stdout (e.g. {example})",
    )


def add_exit_zero(parser: argparse.ArgumentParser, what: str = "there are findings") -> None:
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help=f"exit 0 even when {what} (errors still exit 2)",
    )


def emit(output: str, output_file: str | None = None) -> None:
    """The report: on stdout, or into ``output_file`` (created or replaced; a file that cannot
    be written is one error line, exit 2). Nothing is printed for an empty report on stdout."""
    if output_file is None:
        if output:
            print(output)
        return
    try:
        with open(output_file, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(output + "\n" if output else "")
    except OSError as exc:
        raise UsageError(f"{output_file}: cannot write the report: {exc.strerror or exc}") from exc


def relative(path: str | os.PathLike[str]) -> str:
    """A file as reports name it (check, apply): relative to the current directory."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return os.fspath(path)


def positive(value: str) -> int:
    """An argparse type: a whole number >= 1."""
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return number


def github_escape(value: str, *, prop: bool = False) -> str:
    """A value in a GitHub workflow command: the message (``prop=False``) or a property such
    as ``file=`` or ``title=`` (``prop=True``)."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value
