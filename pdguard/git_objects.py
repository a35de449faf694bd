"""Git objects read through one ``git cat-file --batch`` per repository and process, never
trusting what it says about a size.

A loose object is a zlib stream whose header states the size; ``git cat-file --batch`` prints
that size and then what the stream holds. A corrupt header that states more than is there
leaves a reader that believes it waiting forever for bytes git will never send (GitPython's
object database does exactly that). Here the stated size is bounded first, every read has a
deadline, and on any failure the process is killed and the next read starts a new one, so a
read never gets another object's leftovers.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import select
import subprocess
import time
from dataclasses import dataclass, field

# Larger than any object pdguard reads: a source file is at most 2 MB (``tree.SOURCE_LIMIT``),
# and a tree object of SGLang's largest directory is a few KB.
MAX_OBJECT = 16 << 20
# No byte from git for this long while an object is being read: git is not going to send it.
STALL_SECONDS = 20.0


class ObjectError(Exception):
    """Why an object could not be read (the caller names the ref, the path and the id)."""


@dataclass
class CatFile:
    """One ``git cat-file --batch`` of a repository, started on first use in this process (a
    forked worker starts its own: pipes shared with a parent would interleave)."""

    git_dir: str
    stall_seconds: float = STALL_SECONDS
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _pid: int = 0
    _buffer: bytearray = field(default_factory=bytearray, repr=False)

    def read(self, hexsha: str) -> tuple[str, bytes]:
        """(type, content) of the object, its content hashed against its id; ``ObjectError``
        if it is missing, states an impossible size, does not hash to its id, or git stops
        sending it."""
        proc = self._running()
        try:
            assert proc.stdin is not None
            proc.stdin.write(hexsha.encode() + b"\n")
            proc.stdin.flush()
            header = self._line()
            parts = header.split()
            if len(parts) == 2 and parts[1] == b"missing":
                raise ObjectError("could not be resolved: git has no such object")
            if len(parts) != 3 or parts[0].decode(errors="replace") != hexsha:
                raise ObjectError(f"git cat-file answered {header[:80]!r}")
            kind, size = parts[1].decode(errors="replace"), int(parts[2])
            if not 0 <= size <= MAX_OBJECT:
                raise ObjectError(f"its header states {size} bytes, more than any object read")
            data = self._exactly(size + 1)
            if data[-1:] != b"\n":
                raise ObjectError("git cat-file's answer is not terminated")
        except (ObjectError, OSError, ValueError):
            self.close()
            raise
        data = data[:-1]
        # what git hands back is checked against its id: a corrupt object (a short read, a
        # wrong header) is this object's error, not the next read's
        actual = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)) + data).hexdigest()
        if actual != hexsha:
            raise ObjectError(f"its content hashes to {actual} ({len(data)} bytes)")
        return kind, data

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._buffer.clear()
        if proc is not None and self._pid == os.getpid():
            proc.kill()
            proc.wait()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                ["git", "--git-dir", self.git_dir, "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self._pid = os.getpid()
            self._buffer.clear()
        return self._proc

    def _fill(self) -> None:
        """At least one more byte into the buffer, within the stall deadline."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + self.stall_seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ObjectError(f"git cat-file sent nothing for {self.stall_seconds:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ObjectError("git cat-file ended before the object did")
                self._buffer += chunk
                return

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > 4096:
                raise ObjectError("git cat-file's header line is too long")
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


def header_fields(data: bytes) -> dict[bytes, bytes]:
    """The header fields of a commit or tag object's content (``tree``, ``object``, ...; the
    first of each)."""
    fields: dict[bytes, bytes] = {}
    for line in data.split(b"\n\n", 1)[0].split(b"\n"):
        key, _, value = line.partition(b" ")
        fields.setdefault(key, value)
    return fields


# The readers of this process, by git directory. They stay process-wide, not in a ``Run``: a
# reader is a process resource (a child ``git cat-file`` and its pipes), not a cache. It
# holds no answer: every read hands back the object's own bytes, checked against its id, and
# after any failure the child is killed and the next read starts a new one, so what one run
# read never changes what another reads. Keeping one per process spares each run (``verify``'s
# command and each worker's lane) starting its own git. A forked worker starts its own (the
# pid is checked); all are closed at exit (``close_readers``: atexit, and ``runtime.exit_now``,
# which skips it; tests call it after each test, so none depends on a reader an earlier one
# left).
_READERS: dict[str, CatFile] = {}


def cat_file(git_dir: str) -> CatFile:
    """The reader of a repository's objects (one per git directory and process)."""
    reader = _READERS.get(git_dir)
    if reader is None:
        reader = _READERS[git_dir] = CatFile(git_dir)
    return reader


def close_readers() -> None:
    """Stop every reader this process started (each starts again on its next read)."""
    readers = list(_READERS.values())
    _READERS.clear()
    for reader in readers:
        reader.close()


atexit.register(close_readers)
