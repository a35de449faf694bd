"""All-or-nothing, atomic writes of several files.

Every new content is written first to a temporary file in the target's own directory (same file
system, so the rename is atomic), flushed and fsynced, with the original file's mode. Only when
all temporary files exist are they renamed over the originals. If a rename fails midway, the
files already replaced get their original bytes back, so a run either changes every file or none.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import WriteError

__all__ = ["FileChange", "WriteError", "write_all"]


@dataclass(frozen=True)
class FileChange:
    path: Path  # the file to replace; symlinks are resolved by the caller
    old: bytes
    new: bytes


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _stage(change: FileChange) -> Path:
    mode = stat.S_IMODE(change.path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{change.path.name}.", suffix=".pdguard", dir=change.path.parent
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(change.new)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def write_all(changes: Sequence[FileChange]) -> None:
    """Replace every file in ``changes`` or none of them."""
    staged: list[tuple[FileChange, Path]] = []
    try:
        for change in changes:
            if change.path.read_bytes() != change.old:
                raise WriteError(f"{change.path}: changed on disk while pdguard was working")
            staged.append((change, _stage(change)))
    except BaseException as exc:
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(
                f"{exc.filename or ''}: {exc.strerror or exc}; nothing written"
            ) from exc
        raise
    done: list[FileChange] = []
    try:
        for change, tmp in staged:
            os.replace(tmp, change.path)
            done.append(change)
            _fsync_dir(change.path.parent)
    except OSError as exc:
        for change in done:
            with contextlib.suppress(OSError):
                restore = _stage(FileChange(change.path, change.new, change.old))
                os.replace(restore, change.path)
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise WriteError(
            f"{exc.filename or ''}: {exc.strerror or exc}; changes rolled back"
        ) from exc
