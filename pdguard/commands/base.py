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
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, UsageError

if TYPE_CHECKING:
    from ..tree import DirectoryTree

__all__ = [
    "EXIT_CHANGES",
    "EXIT_ERROR",
    "EXIT_OK",
    "add_exit_zero",
    "add_format",
    "add_output_file",
    "add_quiet",
    "add_target",
    "emit",
    "github_escape",
    "positive",
    "relative",
    "shown_path",
    "target_tree",
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
        "--output-format",  # ruff's name
        dest="format",
        type=format_name,
        choices=names,
        default=default,
        metavar="{" + ",".join(names) + "}",
        help=f"output format (default: {default}); --output-format is the same (ruff's name)",
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


def shown_path(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> str:
    """A file as pdguard names it (docs/cli.md, "Paths"), never with ``../``: relative to the
    current directory when it lies below it; else relative to ``root`` when given (diffs and
    annotations, which need a relative path: ``git apply``/``patch -p1`` work from there);
    else absolute (reports and error lines, for people). Forward slashes."""
    absolute = _real_dir(path)
    bases = [Path.cwd().resolve()]
    if root is not None:
        bases.append(Path(os.path.realpath(root)))
    for base in bases:
        if absolute.is_relative_to(base):
            return absolute.relative_to(base).as_posix()
    return absolute.as_posix()


def workspace() -> Path | None:
    """The workflow's workspace (``GITHUB_WORKSPACE``, the repository's checkout) when pdguard
    runs in a GitHub workflow: GitHub resolves annotations' and code scanning's relative paths
    from there, wherever the step's ``working-directory`` is."""
    where = os.environ.get("GITHUB_WORKSPACE")
    return Path(os.path.realpath(where)) if where else None


def workspace_rel(path: str | os.PathLike[str]) -> str | None:
    """``path`` relative to the workflow's workspace (``workspace``), when there is one and the
    file lies in it; else None."""
    base = workspace()
    absolute = _real_dir(path)
    if base is not None and absolute.is_relative_to(base):
        return absolute.relative_to(base).as_posix()
    return None


def annotation_path(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """A file on disk as a GitHub annotation names it: relative to the workflow's workspace
    when it lies in it (what GitHub resolves it from), else as a diff names it
    (``shown_path`` with the tree's ``root``)."""
    return workspace_rel(path) or shown_path(path, root)


def _real_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute, its directories' symlinks resolved (not the file's own: a link
    inside the tree is named as it is)."""
    absolute = Path(os.path.abspath(path))
    return Path(os.path.realpath(absolute.parent)) / absolute.name


def outside_cwd(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies outside the current directory (reports then name it from the
    tree's root)."""
    return not _real_dir(path).is_relative_to(Path.cwd().resolve())


def tree_root(tree: object) -> Path | None:
    """The directory a tree's paths are shown from when it lies outside the current directory:
    its root (what was named, or found), or None for a tree that is not on disk."""
    root = getattr(tree, "root", None)
    return Path(os.path.abspath(root)) if root is not None else None


def add_quiet(parser: argparse.ArgumentParser, what: str = "the summary line") -> None:
    """``-q/--quiet`` (ruff's): only the report's own lines, no summary, no progress."""
    shown = what if "progress" in what else f"{what} or progress"
    parser.add_argument("-q", "--quiet", action="store_true", help=f"do not print {shown}")


def add_target(parser: argparse.ArgumentParser, help: str) -> None:
    """``TARGET`` (default: the current directory, or the SGLang tree it lies in) and
    ``--installed``."""
    parser.add_argument(
        "target", nargs="?", metavar="TARGET", help=f"{help} (default: ., or the tree . is in)"
    )
    add_installed(parser)


INSTALLED_HELP = "the sglang package this Python would import (found without importing it)"


def add_installed(parser: argparse.ArgumentParser | argparse._ActionsContainer) -> None:
    parser.add_argument("--installed", action="store_true", help=INSTALLED_HELP)


def installed_checkout(command: str, instead: str) -> Path:
    """The git work tree holding the installed sglang (an editable install of a checkout,
    ``pip install -e python``), for a command that reads git (``carry``, ``export``); an
    installed wheel has none: one error line saying why, and what to run instead."""
    from ..tree import installed_tree

    package = installed_tree().base / "sglang"
    for parent in [package, *package.parents]:
        if (parent / ".git").exists():
            return parent
    raise UsageError(
        f"{command} --installed: {package} is not in a git checkout (an installed wheel), and "
        f"{command} works on a git checkout; {instead}"
    )


def target_tree(args: argparse.Namespace) -> DirectoryTree:
    """The tree ``add_target``'s arguments name: ``--installed``, TARGET, or ``.`` (found
    upward from a subdirectory)."""
    from ..tree import find_tree, installed_tree

    if args.installed:
        if args.target is not None:
            raise UsageError("give TARGET or --installed, not both")
        return installed_tree()
    return find_tree(args.target if args.target is not None else ".")


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
