"""The target's own isort settings, found the way isort finds them but never outside the tree."""

from __future__ import annotations

import isort
from isort.settings import CONFIG_SECTIONS, CONFIG_SOURCES, _get_config_data

from codemods.isort_imports import DEFAULT_ISORT_CONFIG

from .tree import SourceTree


def isort_config_for(tree: SourceTree, rel: str) -> tuple[isort.Config, str]:
    """isort's ``Config`` for file ``rel`` and where it came from.

    Searches ``rel``'s directory and its parents up to the tree root, nearest first, for the
    files isort reads (``.isort.cfg``, ``pyproject.toml [tool.isort]``, ``setup.cfg``, ...). With
    none, SGLang's own settings: ``profile=black``, ``known_first_party=sglang``.
    """
    for directory in tree.config_dirs(rel):
        for name in CONFIG_SOURCES:
            candidate = directory / name
            if candidate.is_file() and _get_config_data(str(candidate), CONFIG_SECTIONS[name]):
                return isort.Config(settings_file=str(candidate)), str(candidate)
    return DEFAULT_ISORT_CONFIG, "default (profile=black, known_first_party=sglang)"
