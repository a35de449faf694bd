"""The target's own isort settings, found the way isort finds them but never outside the tree."""

from __future__ import annotations

import configparser
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError
from .tree import SourceTree

if TYPE_CHECKING:
    import isort


def isort_config_for(tree: SourceTree, rel: str) -> tuple[isort.Config | None, str]:
    """isort's ``Config`` for file ``rel`` and where it came from.

    Searches ``rel``'s directory and its parents up to the tree root, nearest first, for the
    files isort reads (``.isort.cfg``, ``pyproject.toml [tool.isort]``, ``setup.cfg``, ...). With
    none, None: the codemods' default, SGLang's own settings (``profile=black``,
    ``known_first_party=sglang``), made only if an import is added.
    """
    for name, content, shown in tree.config_files(rel):
        try:
            config = _config_from(name, content)
        except Exception as exc:  # TOML/INI syntax, an unknown profile, a bad value, ...
            raise ConfigError(f"{shown}: cannot read its isort settings: {_why(exc)}") from exc
        if config is not None:
            return config, name
    return None, "default (profile=black, known_first_party=sglang)"


# isort's reader turns ``max_line_length = off`` (EditorConfig's "no limit") into an infinite
# float that it then fails to convert to int; pdguard gives it a length no line reaches.
_NO_LIMIT = 1 << 30
_OFF = re.compile(rb"^(\s*max_line_length\s*[=:]\s*)off(\s*)$", re.M | re.I)


def _why(exc: BaseException) -> str:
    """Why a settings file was refused, without quoting its content (a symlink to
    ``/proc/self/environ`` would print the environment): the kind of error and its line."""
    kind = type(exc).__name__
    line = getattr(exc, "lineno", None)
    where = f" at line {line}" if isinstance(line, int) else ""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"{kind}: no [section] header before the first setting{where}"
    if isinstance(exc, configparser.ParsingError):
        numbers = sorted({n for n, _ in getattr(exc, "errors", [])})
        where = f" at line {numbers[0]}" if numbers else where
    if isinstance(exc, configparser.Error):
        return f"{kind}: not valid INI syntax{where}"
    if type(exc).__module__.startswith("tomllib") or kind == "TOMLDecodeError":
        text = " ".join(str(exc).split())  # "Invalid value (at line 3, column 9)": no content
        return f"{kind}: {text[:120]}"
    if kind == "ProfileDoesNotExist":
        return f"{kind}: its profile is not one isort knows"
    # any other message may quote the file ("invalid literal for int(): 'x'", an unquoted
    # value): only the kind of error is said
    return f"{kind}{where}: a setting has a value isort does not accept"


# A memo of a pure function of a settings file's content, process-wide (docs/architecture.md,
# "A run"): the same answer in any run, an isort.Config (frozen), bounded.
@lru_cache(maxsize=32)
def _config_from(name: str, content: bytes) -> isort.Config | None:
    """isort's own reading of a settings file (it reads from disk: give it a private copy)."""
    import isort
    from isort.settings import CONFIG_SECTIONS, _get_config_data

    if name == ".editorconfig":
        content = _OFF.sub(rb"\g<1>%d\g<2>" % _NO_LIMIT, content)
    with tempfile.TemporaryDirectory(prefix="pdguard-isort-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(content)
        if not _get_config_data(str(path), CONFIG_SECTIONS[name]):
            return None
        return isort.Config(settings_file=str(path))
