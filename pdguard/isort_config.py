"""The target's own isort settings, found the way isort finds them but never outside the tree."""

from __future__ import annotations

import tempfile
from functools import cache
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
            why = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise ConfigError(f"{shown}: cannot read its isort settings: {why}") from exc
        if config is not None:
            return config, name
    return None, "default (profile=black, known_first_party=sglang)"


@cache
def _config_from(name: str, content: bytes) -> isort.Config | None:
    """isort's own reading of a settings file (it reads from disk: give it a private copy)."""
    import isort
    from isort.settings import CONFIG_SECTIONS, _get_config_data

    with tempfile.TemporaryDirectory(prefix="pdguard-isort-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(content)
        if not _get_config_data(str(path), CONFIG_SECTIONS[name]):
            return None
        return isort.Config(settings_file=str(path))
