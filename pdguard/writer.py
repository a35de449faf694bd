"""All-or-nothing, atomic writes of several files, that survive signals and a killed process.

``write_all(changes)`` replaces every file in ``changes`` or none of them. Bytes in, bytes out:
encoding, BOM and line endings are the caller's business. Symlinks are resolved by the caller;
the writer replaces the path it is given.

Guarantees:

- **Checked before anything is created.** Every file must still hold ``old`` (else "changed on
  disk") and must be writable (see *Permission rule*). One refusal writes nothing.
- **Atomic per file, all or nothing overall.** New content goes to a temporary file in the
  target's own directory (same file system, so the rename is atomic), fsynced. The original is
  kept as a backup (a hard link, or an fsynced copy where hard links are not possible). Only
  when every temporary file and backup exists are the temporary files renamed over the
  originals. If a rename fails, the files already replaced are put back from their backups.
- **Owner, group and mode kept.** The temporary file gets the original's uid, gid and mode
  (setuid/setgid/sticky bits included) before it is renamed. Running as root on another user's
  tree leaves the files owned by that user. A process that cannot give the file its owner back
  (not root, and the file is not its own) gets a ``WriteError`` and nothing is written.
- **Signals.** SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked (``signal.pthread_sigmask``)
  for the whole call, in the calling thread. One that arrives meanwhile is delivered when
  ``write_all`` is done (or has rolled back): a Ctrl-C raises ``KeyboardInterrupt`` after the
  commit, a SIGTERM ends the process after it. Never half-way.
- **Journal.** Before anything is staged, a journal ``.pdguard-journal-<id>.json`` is written
  and fsynced in the deepest directory that holds all the changed files. It lists, per file, the
  target, the temporary file and the backup. It is removed last. A process killed outright
  (SIGKILL, OOM, power loss) leaves it behind, and the next ``write_all`` (or ``recover``)
  finds it and repairs the tree: if every rename had happened, it finishes the write (removes
  the backups); otherwise it rolls back (puts every replaced file's original back) and removes
  all temporary files. A journal is only acted on if it is owned by the current user, not
  writable by group or others, lists paths of the expected shape below its own directory, and
  matches the record its run wrote first in the user's state directory (``pdguard.state``: the
  journal's path, the sha256 of its bytes, the host name). A journal committed to a tree (a
  checkout makes it the user's) has no record and is ignored. A journal that another live
  process holds (``flock``) is never touched. ``pending`` lists journals without touching
  them: a dry run reports them instead of repairing.

Permission rule: a file is refused, even for root (whom the kernel would let write anything),
when its **owner** has no write permission (``chmod a-w``, mode 0o444, 0o555, ...): the user
marked it read-only. A non-root process must also be allowed to write it by the usual rules
(``os.access(path, W_OK)``: owner, group, other bits and ACLs).

Recovery notes: ``write_all`` logs each repair it made at WARNING on the ``pdguard.writer``
logger (with no logging set up, Python prints WARNING messages on stderr). ``recover`` returns
the same notes as a list of strings, for a caller that wants to repair a tree before it reads it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from .errors import WriteError
from .state import (
    STATE_ENV,
    UntrustedState,
    private_dir,
    read_private,
    state_dir,
    trusted,
    write_private,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]  # no module: locking is skipped

log = logging.getLogger(__name__)

JOURNAL_PREFIX = ".pdguard-journal-"
JOURNAL_SUFFIX = ".json"
_PART = ".part"
_SUFFIX = ".pdguard"  # every temporary file and backup ends with it
_JOURNAL_LIMIT = 16 << 20  # a journal larger than this is not one pdguard wrote
_DEFERRED_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)

# Test-only hook: called with 0 once everything is staged, then with the number of files renamed
# so far after each rename. The signal and SIGKILL tests set it in a child process.
_after_rename: Callable[[int], None] | None = None

__all__ = ["FileChange", "WriteError", "write_all"]


@dataclass(frozen=True)
class FileChange:
    path: Path  # the file to replace; symlinks are resolved by the caller
    old: bytes
    new: bytes


@dataclass(frozen=True)
class _Entry:
    target: Path
    temp: Path
    backup: Path


# ---------------------------------------------------------------------------------------------
# small helpers


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Block SIGINT/SIGTERM/SIGHUP/SIGQUIT in this thread; pending ones arrive on exit."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _lock(fd: int) -> bool:
    """Take the journal's lock without waiting; False if another process holds it."""
    if fcntl is None:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _error(exc: BaseException, outcome: str, where: Path | None = None) -> WriteError:
    """One line for a failed write, naming the file: the one the OSError names, else ``where``
    (a full disk or a file-size limit is raised by a write(), which names no file)."""
    if isinstance(exc, WriteError):
        return exc
    if isinstance(exc, OSError):
        return WriteError(f"{exc.filename or where or '?'}: {exc.strerror or exc}; {outcome}")
    return WriteError(f"{exc}; {outcome}")


def _naming(exc: OSError, path: Path, doing: str) -> OSError:
    """``exc`` with ``path`` as its file name if it names none (ENOSPC, EFBIG, EIO from a
    write or fsync), and what was being done."""
    if exc.filename:
        return exc
    named = OSError(exc.errno, f"{exc.strerror or exc} ({doing})", os.fsdecode(path))
    named.__cause__ = exc
    return named


# ---------------------------------------------------------------------------------------------
# checks and staging


def _refusal(path: Path, st: os.stat_result) -> str | None:
    """Why ``path`` must not be replaced (the permission rule), or None."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    mode = stat.S_IMODE(st.st_mode)
    if not mode & stat.S_IWUSR:
        return f"read-only (mode {mode:#o}: its owner has no write permission)"
    effective = os.access in os.supports_effective_ids
    if not os.access(path, os.W_OK, effective_ids=effective):
        return f"no write permission (mode {mode:#o}, owner uid {st.st_uid})"
    return None


def _check(change: FileChange) -> None:
    try:
        st = os.stat(change.path)
        current = change.path.read_bytes()
    except OSError as exc:
        raise _error(exc, "nothing written") from exc
    if current != change.old:
        raise WriteError(f"{change.path}: changed on disk while pdguard was working")
    reason = _refusal(change.path, st)
    if reason is not None:
        raise WriteError(f"{change.path}: {reason}; nothing written")


def _create(path: Path, data: bytes, like: os.stat_result, target: Path) -> None:
    """Create ``path`` (must not exist) holding ``data``, with the owner, group and mode of
    ``like`` (the stat of ``target``), fsynced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            mine = os.fstat(handle.fileno())
            if (mine.st_uid, mine.st_gid) != (like.st_uid, like.st_gid):
                try:
                    os.fchown(handle.fileno(), like.st_uid, like.st_gid)
                except PermissionError as exc:
                    raise WriteError(
                        f"{target}: owned by {like.st_uid}:{like.st_gid}; only that user or root "
                        "can replace it and keep its owner; nothing written"
                    ) from exc
            os.fchmod(handle.fileno(), stat.S_IMODE(like.st_mode))  # after chown: it clears setuid
            os.fsync(handle.fileno())
    except OSError as exc:
        _unlink(path)
        raise _naming(exc, target, f"writing {path.name}") from exc
    except BaseException:
        _unlink(path)
        raise


def _stage(change: FileChange, entry: _Entry) -> None:
    """Create the temporary file (new bytes), then the backup of the original.

    This order matters to ``_repair``: a backup never exists without its temporary file until
    the commit starts.
    """
    st = os.stat(change.path)
    _create(entry.temp, change.new, st, change.path)
    try:
        os.link(change.path, entry.backup, follow_symlinks=False)
    except OSError:  # no hard links here (file system, protected_hardlinks): an fsynced copy
        _create(entry.backup, change.old, st, change.path)


# ---------------------------------------------------------------------------------------------
# the journal


def _entries(changes: Sequence[FileChange], run: str) -> list[_Entry]:
    entries = []
    for change in changes:
        target = Path(os.path.abspath(change.path))
        entries.append(
            _Entry(
                target=target,
                temp=target.with_name(f".{target.name}.{run}.new{_SUFFIX}"),
                backup=target.with_name(f".{target.name}.{run}.orig{_SUFFIX}"),
            )
        )
    return entries


class _Journal:
    """The journal file of one run, locked (flock) from creation to removal."""

    def __init__(self, directory: Path, run: str, entries: Sequence[_Entry]) -> None:
        self.path = directory / f"{JOURNAL_PREFIX}{run}{JOURNAL_SUFFIX}"
        part = self.path.with_name(self.path.name + _PART)
        record = {
            "pdguard_journal": 1,
            "pid": os.getpid(),
            "files": [
                {
                    "target": os.fsdecode(e.target),
                    "temp": os.fsdecode(e.temp),
                    "backup": os.fsdecode(e.backup),
                }
                for e in entries
            ],
        }
        data = json.dumps(record, indent=1).encode()
        # the run's record in the user's state directory, written first: a journal (or its
        # .part) is acted on only if its record is there and names it and its exact bytes
        try:
            self.record = _record_path(run)
            write_private(self.record, _record(self.path, data))
        except OSError as exc:
            raise WriteError(
                f"{state_dir()}: cannot record the journal there ({exc.strerror or exc}); set "
                f"{STATE_ENV} to a directory only you can write; nothing written"
            ) from exc
        try:
            self.fd = os.open(
                part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
            )
        except BaseException:
            _unlink(self.record)
            raise
        try:
            _lock(self.fd)
            if os.write(self.fd, data) != len(data):
                raise OSError(errno.EIO, "short write (a full disk or a file-size limit)")
            os.fsync(self.fd)
            os.rename(part, self.path)  # complete before it can be seen under its real name
            _fsync_dir(directory)
        except OSError as exc:
            _unlink(part)
            _unlink(self.record)
            os.close(self.fd)
            raise _naming(exc, part, "writing the journal") from exc
        except BaseException:
            _unlink(part)
            _unlink(self.record)
            os.close(self.fd)
            raise

    def remove(self) -> None:
        _unlink(self.path)
        _fsync_dir(self.path.parent)
        _unlink(self.record)
        os.close(self.fd)

    def release(self) -> None:
        """Keep the journal on disk for the next run, but let that run take it."""
        os.close(self.fd)


def _run_of(path: Path) -> str:
    """The run id in a journal's name (``.pdguard-journal-<run>.json[.part]``)."""
    return path.name.removeprefix(JOURNAL_PREFIX).removesuffix(_PART).removesuffix(JOURNAL_SUFFIX)


def _record_path(run: str) -> Path:
    """Where the run's record is kept (``UntrustedState``, an OSError, if that directory is
    not this user's alone)."""
    if not run or "/" in run or run.startswith("."):
        raise UntrustedState(f"{run!r}: not a run id pdguard makes")
    return private_dir(state_dir() / "journals") / f"{run}.json"


def _record(journal: Path, data: bytes) -> bytes:
    return json.dumps(
        {
            "journal": os.fsdecode(journal),
            "sha256": hashlib.sha256(data).hexdigest(),
            "host": socket.gethostname(),
        }
    ).encode()


def _unrecorded(path: Path, data: bytes | None) -> str | None:
    """Why the journal at ``path`` (holding ``data``; None: a .part, any content) is not one
    this user's pdguard wrote on this machine, or None if it is."""
    try:
        record = json.loads(read_private(_record_path(_run_of(path))))
    except FileNotFoundError:
        return f"not written by pdguard for this user on this machine (no record in {state_dir()})"
    except (OSError, ValueError) as exc:
        return f"its record in {state_dir()} cannot be trusted ({exc})"
    final = path.with_name(path.name.removesuffix(_PART))
    if not isinstance(record, dict) or record.get("journal") != os.fsdecode(final):
        return f"its record in {state_dir()} names another journal"
    if record.get("host") != socket.gethostname():
        return f"written on another machine ({record.get('host')})"
    if data is not None and record.get("sha256") != hashlib.sha256(data).hexdigest():
        return "changed since pdguard wrote it"
    return None


def _load(path: Path, st: os.stat_result, fd: int) -> list[_Entry] | str:
    """The journal's entries, or why it cannot be trusted."""
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "not created by this user"
    if not stat.S_ISREG(st.st_mode) or st.st_size > _JOURNAL_LIMIT:
        return "not a journal pdguard writes"
    try:
        data = os.pread(fd, _JOURNAL_LIMIT, 0)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    why = _unrecorded(path, data)
    if why is not None:
        return why
    try:
        record = json.loads(data)
        files = record["files"]
        entries = [_Entry(Path(f["target"]), Path(f["temp"]), Path(f["backup"])) for f in files]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable ({exc})"
    for e in entries:
        shape = (
            e.target.is_absolute()
            and e.target.parent.is_relative_to(path.parent)
            and all(
                p.parent == e.target.parent
                and p.name.startswith(f".{e.target.name}.")
                and p.name.endswith(_SUFFIX)
                for p in (e.temp, e.backup)
            )
        )
        if not shape:
            return f"unexpected entry {e.target}"
    return entries


def _repair(entries: Sequence[_Entry]) -> tuple[str, list[Path], list[str]]:
    """Finish or roll back an interrupted run: (what was done, files restored, failures).

    A temporary file disappears only by being renamed over its target, and backups are only
    removed once every rename happened. So: no temporary file left means every file was replaced
    (finish: drop the backups); otherwise the entries without a temporary file but with a backup
    are the ones replaced, and they get their backup back.
    """
    failures: list[str] = []
    restored: list[Path] = []
    if not any(_exists(e.temp) for e in entries):
        for e in entries:
            try:
                _unlink(e.backup)
            except OSError as exc:
                failures.append(f"{e.backup}: {exc.strerror or exc}")
        action = "finished (every file had been replaced; leftover backups removed)"
    else:
        # restore first; remove temporary files only once every original is back, so that a
        # repair that fails half-way still reads as "roll back" next time
        for e in entries:
            if _exists(e.temp) or not _exists(e.backup):
                continue
            try:
                if _exists(e.target) and os.path.samefile(e.backup, e.target):
                    continue  # a hard link to the target itself: it was never replaced
                os.replace(e.backup, e.target)
                restored.append(e.target)
            except OSError as exc:
                failures.append(f"{e.target}: {exc.strerror or exc}")
        if not failures:
            for e in entries:
                for leftover in (e.backup, e.temp):
                    try:
                        _unlink(leftover)
                    except OSError as exc:
                        failures.append(f"{leftover}: {exc.strerror or exc}")
        action = (
            f"rolled back ({len(restored)} file(s) restored to their original content)"
            if restored
            else "cleaned up (no file had been replaced yet)"
        )
    for directory in {e.target.parent for e in entries}:
        _fsync_dir(directory)
    return action, restored, failures


def _journals(directory: Path) -> list[Path]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(
        directory / name
        for name in names
        if name.startswith(JOURNAL_PREFIX)
        and (name.endswith(JOURNAL_SUFFIX) or name.endswith(JOURNAL_SUFFIX + _PART))
    )


@dataclass(frozen=True)
class _Recovery:
    """What was done after one journal: the note to give, the files restored, whether a live
    run holds it, and whether it was left alone as not pdguard's (``ignored``: a note that every
    later look at the same directory would give again)."""

    note: str | None = None
    restored: list[Path] = field(default_factory=list)
    live: bool = False
    ignored: bool = False


def _recover_one(path: Path) -> _Recovery:
    """Repair after one journal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:  # its run just finished
        return _Recovery()
    except OSError as exc:
        return _Recovery(f"pdguard: journal {path} ignored: {exc.strerror or exc}", ignored=True)
    try:
        if not _lock(fd):
            return _Recovery(live=True)
        st = os.fstat(fd)
        if path.name.endswith(_PART):  # killed while writing the journal: nothing staged yet
            why = _unrecorded(path, None) if trusted(st) else "not created by this user"
            if why is None and stat.S_ISREG(st.st_mode):
                _unlink(path)
                _forget(path)
                return _Recovery(
                    f"pdguard: removed an incomplete journal {path} (nothing was written)"
                )
            return _Recovery(f"pdguard: journal {path} ignored: {why}", ignored=True)
        loaded = _load(path, st, fd)
        if isinstance(loaded, str):
            return _Recovery(f"pdguard: journal {path} ignored: {loaded}", ignored=True)
        action, restored, failures = _repair(loaded)
        if failures:
            return _Recovery(
                f"pdguard: an interrupted write (journal {path}) could not be fully repaired: "
                + "; ".join(failures)
                + "; the journal is kept and the next run tries again",
                restored,
            )
        _unlink(path)
        _fsync_dir(path.parent)
        _forget(path)
        return _Recovery(f"pdguard: an interrupted write (journal {path}) was {action}", restored)
    finally:
        os.close(fd)


def _forget(journal: Path) -> None:
    """Remove the record of a journal that is gone."""
    with contextlib.suppress(OSError):
        _unlink(_record_path(_run_of(journal)))


def _recover_in(directories: Iterable[Path]) -> list[tuple[Path, _Recovery]]:
    return [
        (path, _recover_one(path)) for directory in directories for path in _journals(directory)
    ]


def _ancestors(directories: Iterable[Path]) -> list[Path]:
    seen: dict[Path, None] = {}
    for directory in directories:
        for d in (directory, *directory.parents):
            seen.setdefault(d, None)
    return list(seen)


def _searched(directory: Path) -> list[Path]:
    """The directories ``recover`` looks for journals in: ``directory``, its parents and every
    directory below it (version-control and cache directories left out)."""
    root = Path(os.path.abspath(directory))
    below: list[Path] = []
    for current, dirs, _ in os.walk(root):
        dirs[:] = [
            d for d in dirs if d not in {".git", ".hg", ".svn", "__pycache__", "node_modules"}
        ]
        below.append(Path(current))
    return _ancestors([root]) + below[1:]


def pending(directory: Path) -> list[Path]:
    """Every journal ``recover(directory)`` would look at (pdguard's or not), without opening,
    changing or removing anything: what a dry run reports instead of repairing."""
    return [path for d in _searched(directory) for path in _journals(d)]


def recover(directory: Path) -> list[str]:
    """Repair every interrupted write whose journal is in ``directory``, below it or above it.

    Returns one note per journal found (what was rolled back or finished), for the caller to
    print on stderr; an empty list when there was nothing to do. Call it on a tree before
    reading the tree, so that a plan is never made from a half-written tree. Journals held by a
    live pdguard run are left alone (and noted).
    """
    with _signals_deferred():
        done = _recover_in(_searched(directory))
    notes = [r.note for _, r in done if r.note]
    notes.extend(
        f"pdguard: journal {path} is held by a running pdguard; left alone"
        for path, r in done
        if r.live
    )
    return notes


# ---------------------------------------------------------------------------------------------
# write_all


def write_all(changes: Sequence[FileChange]) -> None:
    """Replace every file in ``changes`` or none of them; raise ``WriteError`` if none.

    Before writing, repairs what an interrupted earlier run left in the directories it is about
    to write to (journals there or in their parents), logging a WARNING note on the
    ``pdguard.writer`` logger for each it repaired (an INFO note for one it left alone as not
    pdguard's: ``recover``, which a command runs first, has given that note already). If that
    repair restored a file that is not among ``changes`` (the changes were planned on the
    half-written tree), nothing is written and ``WriteError`` asks for a new run. See the
    module docstring for the guarantees.
    """
    if not changes:
        return
    with _signals_deferred():
        parents = [Path(os.path.abspath(c.path)).parent for c in changes]
        done = _recover_in(_ancestors(parents))
        for _, r in done:
            # a journal left alone was noted by ``recover`` already, when a command ran it
            if r.note:
                log.log(logging.INFO if r.ignored else logging.WARNING, "%s", r.note)
        restored = [p for _, r in done for p in r.restored]
        busy = [path for path, r in done if r.live]
        if busy:
            raise WriteError(f"{busy[0]}: another pdguard run is writing here; nothing written")
        targets = {Path(os.path.abspath(c.path)) for c in changes}
        stray = [p for p in restored if p not in targets]
        if stray:
            raise WriteError(
                f"{stray[0]}: restored from an interrupted earlier run, after these changes were "
                "planned; nothing written, run pdguard again"
            )
        for change in changes:
            _check(change)
        _write(changes, Path(os.path.commonpath(parents)))


def _write(changes: Sequence[FileChange], journal_dir: Path) -> None:
    run = f"{os.getpid()}-{secrets.token_hex(4)}"
    entries = _entries(changes, run)
    try:
        journal = _Journal(journal_dir, run, entries)
    except OSError as exc:
        raise _error(exc, "cannot write the journal; nothing written", journal_dir) from exc
    try:
        for change, entry in zip(changes, entries, strict=True):
            _stage(change, entry)
        for directory in {e.target.parent for e in entries}:
            _fsync_dir(directory)
    except BaseException as exc:
        _discard(entries)
        journal.remove()
        if isinstance(exc, OSError):
            raise _error(exc, "nothing written") from exc
        raise
    _commit(entries, journal)


def _discard(entries: Iterable[_Entry]) -> None:
    for entry in entries:
        for leftover in (entry.backup, entry.temp):  # a backup never outlives its temp file
            with contextlib.suppress(OSError):
                _unlink(leftover)


def _commit(entries: Sequence[_Entry], journal: _Journal) -> None:
    done: list[_Entry] = []
    try:
        if _after_rename is not None:
            _after_rename(0)
        for entry in entries:
            os.replace(entry.temp, entry.target)
            done.append(entry)
            _fsync_dir(entry.target.parent)
            if _after_rename is not None:
                _after_rename(len(done))
    except BaseException as exc:
        if len(done) < len(entries):
            _roll_back(entries, done, journal, exc)
        _finish(entries, journal)  # every file was replaced: the write is complete
        raise
    _finish(entries, journal)


def _finish(entries: Sequence[_Entry], journal: _Journal) -> None:
    for entry in entries:  # every file replaced: the originals are no longer needed
        with contextlib.suppress(OSError):
            _unlink(entry.backup)
    for directory in {e.target.parent for e in entries}:
        _fsync_dir(directory)
    journal.remove()


def _roll_back(
    entries: Sequence[_Entry], done: Sequence[_Entry], journal: _Journal, exc: BaseException
) -> NoReturn:
    """Put the originals of ``done`` back and raise; keep the journal if that fails."""
    failures: list[str] = []
    for entry in done:
        try:
            os.replace(entry.backup, entry.target)
        except OSError as undo:
            failures.append(f"{entry.target}: {undo.strerror or undo}")
    for directory in {e.target.parent for e in entries}:
        _fsync_dir(directory)
    if failures:
        # leave every temporary file and backup as it is: the journal (whose entries still
        # read as "roll back", since a file not yet renamed keeps its temporary file) lets
        # the next run finish the rollback
        journal.release()
        raise WriteError(
            f"{getattr(exc, 'filename', None) or ''}: {getattr(exc, 'strerror', None) or exc}; "
            f"rollback incomplete ({'; '.join(failures)}); the next pdguard run rolls back "
            f"using the journal {journal.path}"
        ) from exc
    _discard(entries)
    journal.remove()
    if isinstance(exc, OSError):
        raise _error(exc, "changes rolled back") from exc
    raise exc
