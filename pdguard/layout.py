"""Where pdguard's source lives: the ``pdguard`` folder, and the top-level ``checks/``,
``codemods/`` and ``vendor_sglang/`` folders that install as ``pdguard.checks``,
``pdguard.codemods`` and ``pdguard.vendor_sglang`` (pyproject.toml's ``package-dir``; a test
keeps the two in step)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# The subpackages that live outside the pdguard folder, by name (the folder has the same name).
MAPPED = ("checks", "codemods", "vendor_sglang")


def source_dirs() -> dict[str, Path]:
    """Dotted package name -> the directory its modules are read from, for ``pdguard`` and
    each mapped subpackage (found as Python imports them, without importing them)."""
    dirs = {"pdguard": Path(__file__).resolve().parent}
    for name in MAPPED:
        spec = importlib.util.find_spec(f"pdguard.{name}")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"pdguard.{name} is not installed (pip install -e .)")
        dirs[f"pdguard.{name}"] = Path(next(iter(spec.submodule_search_locations))).resolve()
    return dirs
