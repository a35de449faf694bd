"""pdguard's per-user state: what ties a journal to the run that wrote it, and the key that signs
result-cache entries. Kept out of every tree pdguard reads (a tree, or a git checkout of one, can
hold anything).

Where: ``$PDGUARD_STATE``, else ``$XDG_STATE_HOME/pdguard``, else ``~/.local/state/pdguard``.
The directory is created with mode 0o700 and trusted only while it is owned by the current user
and not writable by group or others (``private_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

STATE_ENV = "PDGUARD_STATE"


class UntrustedState(OSError):
    """The state directory (or a file in it) is not this user's alone."""


def state_dir() -> Path:
    override = os.environ.get(STATE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "pdguard"


def trusted(st: os.stat_result) -> bool:
    """Owned by this user, writable by nobody else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def private_dir(path: Path, *, create: bool = True) -> Path:
    """``path``, a directory this user alone can write (created 0o700 if missing and
    ``create``); ``UntrustedState`` if it is someone else's or others may write it, or is a
    symlink."""
    if create:
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or not trusted(st):
        raise UntrustedState(
            f"{path}: not a directory owned by uid {os.geteuid()} and writable only by it"
        )
    return path


def _read_private(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not trusted(st) or st.st_mode & stat.S_IROTH:
            raise UntrustedState(f"{path}: not a private file of uid {os.geteuid()}")
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _create(path: Path, data: bytes) -> None:
    """A new file ``path`` (mode 0o600, ``FileExistsError`` if there is one) holding ``data``,
    fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.EIO, "short write (a full disk or a file-size limit)", str(path))
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, os.fsdecode(path)) from exc
    else:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """``data`` into ``path`` (mode 0o600) atomically and durably."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    _create(tmp, data)
    os.rename(tmp, path)  # (not os.replace: tests count the writer's own replaces)


def read_private(path: Path) -> bytes:
    """A file this user wrote in the state directory (no symlink, not others' to write)."""
    return _read_private(path)


def secret_key() -> bytes:
    """The user's random key (32 bytes), made on first use; signs result-cache entries."""
    directory = private_dir(state_dir())
    path = directory / "cache-key"
    try:
        key = _read_private(path)
    except FileNotFoundError:
        key = b""
    if len(key) != 32:
        with contextlib.suppress(FileExistsError):
            _create(path, secrets.token_bytes(32))
        key = _read_private(path)  # another process may have made it first: its key wins
        if len(key) != 32:
            raise UntrustedState(f"{path}: not a key pdguard made")
    return key
