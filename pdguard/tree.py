"""Where the SGLang source comes from: one abstraction for a directory on disk (and, later, a git
commit or a release wheel). Everything downstream reads files by their path relative to the
directory that holds the ``sglang`` package, e.g. ``sglang/srt/disaggregation/prefill.py``.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DISAGGREGATION_DIR = "sglang/srt/disaggregation"
PREFILL_PATH = f"{DISAGGREGATION_DIR}/prefill.py"


class TargetError(Exception):
    """The target is not something pdguard can work on (exit code 2)."""


@dataclass(frozen=True)
class SourceTree:
    """An SGLang source tree on disk.

    ``root`` is what the user named (a checkout, a package directory, site-packages);
    ``base`` is the directory holding the ``sglang`` package. Relative paths are relative to
    ``base``; nothing outside ``root`` is read for configuration, and nothing outside ``base``
    is ever written.
    """

    root: Path
    base: Path

    @property
    def label(self) -> str:
        return str(self.root)

    def path(self, rel: str) -> Path:
        """The file behind ``rel``, refusing paths (or symlinks) that lead out of the tree."""
        candidate = self.base / rel
        resolved = candidate.resolve()
        if not resolved.is_relative_to(self.root.resolve()):
            raise TargetError(f"{candidate}: resolves to {resolved}, outside {self.root}")
        return candidate

    def read_bytes(self, rel: str) -> bytes | None:
        path = self.path(rel)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def python_files(self, rel_dir: str) -> list[str]:
        """Relative paths of the ``.py`` files below ``rel_dir``, sorted."""
        top = self.base / rel_dir
        found = []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in filenames:
                if name.endswith(".py"):
                    found.append(Path(dirpath, name).relative_to(self.base).as_posix())
        return sorted(found)

    def config_dirs(self, rel: str) -> list[Path]:
        """Directories from ``rel``'s directory up to the tree root, nearest first."""
        here = self.path(rel).parent
        root = self.root.resolve()
        dirs = []
        while True:
            dirs.append(here)
            if here.resolve() == root or here.parent == here:
                return dirs
            here = here.parent

    def sglang_version(self) -> str | None:
        data = self.read_bytes("sglang/version.py")
        if data is None:
            return None
        match = re.search(rb"""__version__\s*=\s*["']([^"']+)["']""", data)
        return match.group(1).decode() if match else None


def open_tree(target: str | os.PathLike[str]) -> SourceTree:
    """Accept a checkout root (``python/sglang``), an ``sglang`` package directory, or any
    directory holding ``sglang/srt/disaggregation``."""
    root = Path(target)
    if not root.exists():
        raise TargetError(f"{root}: no such directory")
    if not root.is_dir():
        raise TargetError(f"{root}: not a directory (expected an SGLang tree)")
    for base in (root, root / "python", root.parent):
        if (base / DISAGGREGATION_DIR).is_dir() and (base != root.parent or root.name == "sglang"):
            if not (base / PREFILL_PATH).is_file():
                raise TargetError(f"{base / DISAGGREGATION_DIR}: has no prefill.py")
            return SourceTree(root=root, base=base)
    raise TargetError(
        f"{root}: not an SGLang tree (no {DISAGGREGATION_DIR}/ here, under python/, "
        "or as a package directory)"
    )


def installed_tree() -> SourceTree:
    """The ``sglang`` importable from this interpreter, found without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("sglang", sys.path)
    if spec is None or not spec.submodule_search_locations:
        raise TargetError("--installed: no 'sglang' package is importable from " + sys.executable)
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    return open_tree(package_dir)
