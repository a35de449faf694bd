"""Where the SGLang source comes from: one abstraction for a directory on disk and a git commit
(``pdguard.git_tree``). Everything downstream reads files by their path relative to the
directory that holds the ``sglang`` package, e.g. ``sglang/srt/disaggregation/prefill.py``.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import re
import stat
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, TargetError
from .sglang_names import DECODE_PATH, DISAGGREGATION_DIR, PREFILL_PATH, VERSION_PATHS

__all__ = ["DISAGGREGATION_DIR", "PREFILL_PATH", "DirectoryTree", "SourceTree", "read_regular"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, as messages name it."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file; ``TargetError`` naming it otherwise.

    Opened with ``O_NONBLOCK`` (a FIFO or a terminal never blocks the open) and checked with
    ``fstat`` on the open descriptor (no window between the check and the read); symlinks are
    followed, callers check where they lead. FileNotFoundError passes through. ``limit``: a file
    larger than that many bytes is refused (``TargetError``), never read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TargetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TargetError(
                f"{path}: is {file_kind(st.st_mode)}; pdguard reads only regular files"
            )
        if limit is not None and st.st_size > limit:
            if limit == SOURCE_LIMIT:
                raise too_large(str(path), st.st_size)
            raise TargetError(f"{path}: {st.st_size} bytes, more than pdguard reads ({limit})")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError as exc:
        raise TargetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


# The files isort reads its settings from (``isort.settings.CONFIG_SOURCES``, which a test
# compares with this): naming them here lets a tree without any be read without importing isort.
CONFIG_SOURCES = (".isort.cfg", "pyproject.toml", "setup.cfg", "tox.ini", ".editorconfig")
CONFIG_LIMIT = 16 << 20  # a settings file (or METADATA) larger than this is refused, never read
# A source file larger than this is refused with one line (docs/security.md): SGLang's largest
# is ~0.2 MB; at 2 MB of prefill.py every command ends within a minute (docs/security.md).
SOURCE_LIMIT = 2 << 20


def too_large(where: str, size: int) -> TargetError:
    """The one error for a source file over ``SOURCE_LIMIT``."""
    return TargetError(
        f"{where}: {size} bytes, more than pdguard reads in a source file ({SOURCE_LIMIT}); "
        "refused, nothing changed"
    )


class SourceTree(ABC):
    """An SGLang source tree, read by relative path."""

    @property
    @abstractmethod
    def label(self) -> str: ...

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes | None:
        """The file's bytes, None if it does not exist."""

    @abstractmethod
    def python_files(self, rel_dir: str) -> list[str]:
        """Relative paths of the ``.py`` files below ``rel_dir``, sorted."""

    @abstractmethod
    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        """Tool configuration files (isort's) from ``rel``'s directory up to the tree root,
        nearest first: (file name, content, the file as messages name it)."""

    @abstractmethod
    def display(self, rel: str) -> str:
        """How to name file ``rel`` in messages."""

    def sglang_version(self) -> str | None:
        """The release's version: setuptools-scm's ``_version.py`` (0.5.9+) or ``version.py``;
        None if neither says."""
        for rel in VERSION_PATHS:
            data = self.read_bytes(rel)
            version = _assigned_version(data) if data is not None else None
            if version is not None:
                return version
        return None


@dataclass(frozen=True)
class DirectoryTree(SourceTree):
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

    def display(self, rel: str) -> str:
        return str(self.base / rel)

    def path(self, rel: str) -> Path:
        """The file behind ``rel``, refusing paths (or symlinks) that lead out of the tree."""
        candidate = self.base / rel
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
            raise TargetError(f"{candidate}: cannot resolve: {exc}") from exc
        if not resolved.is_relative_to(self.root.resolve()):
            raise TargetError(f"{candidate}: resolves to {resolved}, outside {self.root}")
        return candidate

    def read_bytes(self, rel: str) -> bytes | None:
        """The file's bytes (a regular file only: a FIFO, device or socket is refused, never
        opened for reading in a way that blocks), None if it does not exist."""
        path = self.path(rel)
        try:
            return read_regular(path, SOURCE_LIMIT)
        except FileNotFoundError:
            return None

    def python_files(self, rel_dir: str) -> list[str]:
        """Relative paths of the ``.py`` files below ``rel_dir``, sorted.

        A symlinked directory is followed when it resolves inside the tree (its files count for
        the verdict, by their path through the link), and refused (``TargetError``) when it
        leads out of the tree or back into a directory already walked (a loop); never skipped.
        """
        top = self.base / rel_dir
        root = self.root.resolve()
        found = []
        walked: set[Path] = set()
        for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
            here = Path(dirpath)
            resolved = here.resolve()
            if not resolved.is_relative_to(root):
                raise TargetError(
                    f"{here}: a symlinked directory that leads to {resolved}, outside {self.root}"
                )
            if resolved in walked:
                raise TargetError(
                    f"{here}: a symlinked directory that leads back to {resolved} "
                    "(a loop, or the same directory twice)"
                )
            walked.add(resolved)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in filenames:
                if name.endswith(".py"):
                    found.append((here / name).relative_to(self.base).as_posix())
        return sorted(found)

    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        """isort's settings files from ``rel``'s directory up to ``root``. One that is a symlink
        leading out of the tree, or is not a regular file, is refused (``ConfigError``): isort
        would read it, so pdguard must not pretend it is not there."""
        here = self.path(rel).parent
        root = self.root.resolve()
        while True:
            for name in CONFIG_SOURCES:
                candidate = here / name
                if not os.path.lexists(candidate):
                    continue
                try:
                    resolved = candidate.resolve()
                except (OSError, RuntimeError) as exc:
                    raise ConfigError(f"{candidate}: cannot resolve: {exc}") from exc
                if not resolved.is_relative_to(root):
                    raise ConfigError(
                        f"{candidate}: a symlink that leads out of the tree; pdguard reads "
                        "settings only from inside it"
                    )
                try:
                    data = read_regular(candidate, CONFIG_LIMIT)
                except FileNotFoundError:
                    raise ConfigError(f"{candidate}: a dangling symlink") from None
                except TargetError as exc:
                    raise ConfigError(str(exc)) from exc
                yield name, data, str(candidate)
            if here.resolve() == root or here.parent == here:
                return
            here = here.parent

    def sglang_version(self) -> str | None:
        """As for any tree, or an installed distribution's metadata (site-packages)."""
        version = super().sglang_version()
        if version is not None:
            return version
        for metadata in sorted(self.base.glob("sglang-*.dist-info/METADATA")):
            try:
                text = read_regular(metadata, CONFIG_LIMIT).decode("utf-8", "replace")
            except (FileNotFoundError, TargetError):
                continue  # not the version's source: the version stays unknown
            match = re.search(r"^Version: (\S+)$", text, re.M)
            if match:
                return match.group(1)
        return self._checkout_version()

    def _checkout_version(self) -> str | None:
        """An SGLang git checkout's (``base`` is its top or its ``python/``): from its tags,
        as setuptools-scm names it (``git_version``). A copy vendored deeper inside another
        repository gets none: that repository's tags are not SGLang's."""
        tops = [self.base, self.base.parent] if self.base.name == "python" else [self.base]
        for top in tops:
            if (top / ".git").exists():
                from .git_version import tag_version

                return tag_version(top)
        return None


def _assigned_version(data: bytes) -> str | None:
    """``__version__ = "X"`` at the top level of a module (not in a fallback branch)."""
    try:
        module = ast.parse(data)
    except SyntaxError:
        return None
    for node in module.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def open_tree(target: str | os.PathLike[str]) -> DirectoryTree:
    """Accept a checkout root (``python/sglang``), an ``sglang`` package directory, or any
    directory holding ``sglang/srt/disaggregation``."""
    root = Path(target)
    if not root.exists():
        raise TargetError(f"{root}: no such directory")
    if not root.is_dir():
        raise TargetError(f"{root}: not a directory (expected an SGLang tree)")
    candidates = [root, root / "python"]
    if root.absolute().name == "sglang":  # the package directory itself
        candidates.append(root.absolute().parent)
    found = [base for base in candidates if (base / DISAGGREGATION_DIR).is_dir()]
    if len(found) > 1:
        # Patching one and leaving the other would let check pass on the wrong tree.
        raise TargetError(
            f"{root}: holds two SGLang trees, {found[0] / 'sglang'} and {found[1] / 'sglang'}; "
            "name the one to use"
        )
    for base in found:
        if not (base / PREFILL_PATH).is_file() and not (base / DECODE_PATH).is_file():
            # a decode-only tree (a decode fork, a decode corpus case) has its decode side
            raise TargetError(f"{base / DISAGGREGATION_DIR}: has no prefill.py or decode.py")
        return DirectoryTree(root=root, base=base)
    raise TargetError(
        f"{root}: not an SGLang tree (no {DISAGGREGATION_DIR}/ here, under python/, "
        "or as a package directory)"
    )


def installed_tree() -> DirectoryTree:
    """The ``sglang`` importable from this interpreter, found without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("sglang", sys.path)
    if spec is None or not spec.submodule_search_locations:
        raise TargetError("--installed: no 'sglang' package is importable from " + sys.executable)
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    return open_tree(package_dir)


def find_tree(target: str | os.PathLike[str]) -> DirectoryTree:
    """The SGLang tree at ``target`` (as ``open_tree``), or the one ``target`` lies inside: a
    subdirectory of a checkout (``python/sglang/srt``) finds the checkout, as ruff finds its
    project from any subdirectory. Of the directories above ``target`` that hold the same
    tree, the outermost is its root (so that configuration is read as from that root)."""
    start = Path(target)
    try:
        return open_tree(start)
    except TargetError as exc:
        if not start.is_dir():
            raise
        error = exc
    found: DirectoryTree | None = None
    for parent in start.resolve().parents:
        try:
            tree = open_tree(parent)
        except TargetError:
            if found is not None:
                break
            continue
        if found is not None and tree.base.resolve() != found.base.resolve():
            break
        found = tree
    if found is None:
        raise error
    return found
