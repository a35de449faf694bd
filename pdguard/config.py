"""pdguard's own settings: ``[tool.pdguard]`` in a ``pyproject.toml`` (or the top level of the
TOML file named by ``--config``), as ruff reads ``[tool.ruff]``.

    [tool.pdguard]
    select = ["PDG00"]            # check's rules (codes or prefixes), as --select
    ignore = ["PDG006"]           # as --ignore
    [tool.pdguard.fix.decode-queue-bound]
    enabled = false               # apply (and check --fix) leave this fix out

Found: ``--config PATH``; else the nearest ``pyproject.toml`` holding ``[tool.pdguard]`` from
the target's directory upward, then from the current directory upward; ``--isolated`` reads
none. An unknown key, a value of the wrong type or a file that is not TOML is a one-line error
(exit 2), never silently ignored. Command-line ``--select`` replaces the file's ``select``;
``--ignore`` adds to its ``ignore``.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

KEYS = ("select", "ignore", "fix")
FIX_KEYS = ("enabled",)


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None  # None: every rule
    ignore: tuple[str, ...] = ()
    disabled_fixes: frozenset[str] = frozenset()
    source: str | None = None  # the file they came from

    def rule_codes(
        self, select: Sequence[str] | None, ignore: Sequence[str] | None
    ) -> tuple[Sequence[str] | None, list[str]]:
        """The --select/--ignore values for check, with the file's under the command line's."""
        chosen = list(select) if select is not None else self.select
        return (list(chosen) if chosen is not None else None), [*self.ignore, *(ignore or [])]


@dataclass
class _Reader:
    where: str

    def strings(self, table: dict[str, object], key: str, context: str) -> tuple[str, ...]:
        value = table[key]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.where}: {context}.{key}: expected a list of strings")
        return tuple(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config PATH`` and ``--isolated``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--config",
        metavar="PATH",
        help="read settings from this TOML file ([tool.pdguard] of a pyproject.toml, or the "
        "top level of another file) instead of the nearest pyproject.toml",
    )
    group.add_argument(
        "--isolated",
        action="store_true",
        help="read no settings file (only the command line counts)",
    )


def load(args: argparse.Namespace, target: str | os.PathLike[str] | None) -> Settings:
    """The settings for a command run on ``target`` (None: the installed sglang)."""
    if getattr(args, "isolated", False):
        return Settings()
    explicit = getattr(args, "config", None)
    if explicit is not None:
        path = Path(explicit)
        document = _read(path)
        if path.name == "pyproject.toml":
            return _settings(_tool_table(document, path) or {}, str(path))
        return _settings(document, str(path))
    for path in _candidates(target):
        try:
            if "pdguard" not in path.read_text(encoding="utf-8", errors="replace"):
                continue  # no [tool.pdguard] (a file that is not TOML is isort's to report)
        except OSError:
            continue
        table = _tool_table(_read(path), path)
        if table is not None:
            return _settings(table, str(path))
    return Settings()


def _candidates(target: str | os.PathLike[str] | None) -> list[Path]:
    starts = []
    if target is not None:
        start = Path(target).absolute()
        starts.append(start if start.is_dir() else start.parent)
    starts.append(Path.cwd())
    seen: list[Path] = []
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / "pyproject.toml"
            if candidate.is_file() and candidate not in seen:
                seen.append(candidate)
    return seen


def _read(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read its pdguard settings: {exc}") from exc


def _tool_table(document: dict[str, object], path: Path) -> dict[str, object] | None:
    tool = document.get("tool")
    if not isinstance(tool, dict) or "pdguard" not in tool:
        return None
    table = tool["pdguard"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.pdguard] must be a table")
    return table


def _settings(table: dict[str, object], where: str) -> Settings:
    from .fixes import FIXES

    reader = _Reader(where)
    context = "[tool.pdguard]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: {context}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})"
        )
    select = reader.strings(table, "select", context) if "select" in table else None
    ignore = reader.strings(table, "ignore", context) if "ignore" in table else ()
    disabled = set()
    fixes = table.get("fix", {})
    if not isinstance(fixes, dict):
        raise ConfigError(f"{where}: {context}.fix: expected tables [tool.pdguard.fix.NAME]")
    names = [fix.name for fix in FIXES]
    for name, options in fixes.items():
        if name not in names:
            raise ConfigError(
                f"{where}: [tool.pdguard.fix.{name}]: unknown fix (the fixes: {', '.join(names)})"
            )
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: [tool.pdguard.fix.{name}]: expected a table")
        bad = sorted(set(options) - set(FIX_KEYS))
        if bad:
            raise ConfigError(
                f"{where}: [tool.pdguard.fix.{name}]: unknown key {bad[0]!r} "
                f"(known: {', '.join(FIX_KEYS)})"
            )
        enabled = options.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{where}: [tool.pdguard.fix.{name}].enabled: expected true/false")
        if not enabled:
            disabled.add(name)
    return Settings(select, ignore, frozenset(disabled), where)
