"""pdguard.writer.write_all: atomic, all-or-nothing replacement of several files."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard import writer
from pdguard.writer import FileChange, WriteError, recover, write_all


def _files(tmp_path: Path) -> list[tuple[Path, bytes, bytes]]:
    """Three files in two directories: (path, old bytes, new bytes)."""
    (tmp_path / "a").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    specs = [
        (tmp_path / "a" / "one.py", b"x = 1\n", b"x = 10\n"),
        (tmp_path / "a" / "two.py", b"y = 2\r\n", b"y = 20\r\nz = 3\r\n"),
        (tmp_path / "b" / "three.py", b"\xef\xbb\xbfw = 3\n", b"\xef\xbb\xbfw = 30\n"),
    ]
    for path, old, _ in specs:
        path.write_bytes(old)
    return specs


def _changes(specs: list[tuple[Path, bytes, bytes]]) -> list[FileChange]:
    return [FileChange(path=path, old=old, new=new) for path, old, new in specs]


def _leftovers(tmp_path: Path) -> list[Path]:
    """Temporary files, backups and journals: none may survive a finished call."""
    return sorted(tmp_path.rglob("*.pdguard")) + sorted(tmp_path.rglob(".pdguard-journal-*"))


def _inode(path: Path) -> int:
    return path.stat().st_ino


def test_replaces_every_file(tmp_path: Path) -> None:
    specs = _files(tmp_path)
    inodes = {path: _inode(path) for path, _, _ in specs}
    write_all(_changes(specs))
    for path, _, new in specs:
        assert path.read_bytes() == new
        # replaced by rename (a new inode), never rewritten in place
        assert _inode(path) != inodes[path]
    assert _leftovers(tmp_path) == []


def test_empty_change_list_is_a_no_op(tmp_path: Path) -> None:
    write_all([])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600, 0o644, 0o775, 0o4755])
def test_keeps_file_mode(tmp_path: Path, mode: int) -> None:
    specs = _files(tmp_path)
    for path, _, _ in specs:
        path.chmod(mode)
    write_all(_changes(specs))
    for path, _, new in specs:
        assert path.read_bytes() == new
        assert stat.S_IMODE(path.stat().st_mode) == mode
    assert _leftovers(tmp_path) == []


def test_keeps_distinct_modes_per_file(tmp_path: Path) -> None:
    specs = _files(tmp_path)
    modes = [0o640, 0o755, 0o600]
    for (path, _, _), mode in zip(specs, modes, strict=True):
        path.chmod(mode)
    write_all(_changes(specs))
    for (path, _, _), mode in zip(specs, modes, strict=True):
        assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.parametrize("fail_on", [1, 2, 3])
def test_failed_rename_rolls_everything_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_on: int
) -> None:
    specs = _files(tmp_path)
    for (path, _, _), mode in zip(specs, [0o640, 0o755, 0o600], strict=True):
        path.chmod(mode)
    before = {path: (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) for path, _, _ in specs}
    real_replace = os.replace
    calls: list[tuple[str, str]] = []

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        calls.append((str(src), str(dst)))
        if len(calls) == fail_on:
            raise PermissionError(13, "Permission denied", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", flaky_replace)
    with pytest.raises(WriteError, match="rolled back"):
        write_all(_changes(specs))
    monkeypatch.undo()

    for path, _, _ in specs:
        assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == before[path]
    assert _leftovers(tmp_path) == []
    # the files replaced before the failure were put back (fail_on - 1 restores)
    restored = [dst for _, dst in calls[fail_on:]]
    assert restored == [str(path) for path, _, _ in specs[: fail_on - 1]]


def test_second_rename_failing_restores_the_first_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = _files(tmp_path)[:2]
    (first, first_old, _), (second, second_old, _) = specs
    real_replace = os.replace
    count = 0

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        nonlocal count
        count += 1
        if count == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", flaky_replace)
    with pytest.raises(WriteError) as info:
        write_all(_changes(specs))
    assert "No space left on device" in str(info.value)
    assert str(second) in str(info.value)
    assert first.read_bytes() == first_old
    assert second.read_bytes() == second_old
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("changed", [0, 1, 2])
def test_refuses_a_file_changed_on_disk(tmp_path: Path, changed: int) -> None:
    specs = _files(tmp_path)
    path, old, _ = specs[changed]
    path.write_bytes(old + b"# edited by someone else\n")
    before = {p: p.read_bytes() for p, _, _ in specs}
    with pytest.raises(WriteError, match="changed on disk"):
        write_all(_changes(specs))
    assert {p: p.read_bytes() for p, _, _ in specs} == before
    assert _leftovers(tmp_path) == []


def test_missing_file_is_a_write_error(tmp_path: Path) -> None:
    specs = _files(tmp_path)
    specs[1][0].unlink()
    before = {p: p.read_bytes() for p, _, _ in specs if p.exists()}
    with pytest.raises(WriteError, match="nothing written"):
        write_all(_changes(specs))
    assert {p: p.read_bytes() for p, _, _ in specs if p.exists()} == before
    assert not specs[1][0].exists()
    assert _leftovers(tmp_path) == []


def test_staging_failure_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _files(tmp_path)
    before = {p: p.read_bytes() for p, _, _ in specs}
    real_fchmod = os.fchmod
    count = 0

    def flaky_fchmod(fd, mode):  # type: ignore[no-untyped-def]  # a stand-in for os.fchmod
        nonlocal count
        count += 1
        if count == 3:  # staging the third file
            raise OSError(5, "Input/output error", "third")
        return real_fchmod(fd, mode)

    monkeypatch.setattr(writer.os, "fchmod", flaky_fchmod)
    with pytest.raises(WriteError, match="nothing written"):
        write_all(_changes(specs))
    assert {p: p.read_bytes() for p, _, _ in specs} == before
    assert _leftovers(tmp_path) == []


def test_temp_files_live_next_to_their_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = _files(tmp_path)
    real_replace = os.replace
    seen: list[tuple[Path, Path]] = []

    def spy_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        seen.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", spy_replace)
    write_all(_changes(specs))
    assert [dst for _, dst in seen] == [path for path, _, _ in specs]
    for src, dst in seen:
        assert src.parent == dst.parent  # same directory: same file system, atomic rename
        assert src.name.endswith(".pdguard")
    assert _leftovers(tmp_path) == []


# --- owner, group and mode -------------------------------------------------------------------

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID, OTHER_GID = 1234, 2345


def test_keeps_owner_group_and_mode_of_another_users_file(tmp_path: Path) -> None:
    """Run as root on another user's tree: the patched files stay that user's."""
    specs = _files(tmp_path)
    modes = [0o755, 0o640, 0o2775]
    for (path, _, _), mode in zip(specs, modes, strict=True):
        if ROOT:
            os.chown(path, OTHER_UID, OTHER_GID)
        path.chmod(mode)  # after chown, which would clear the setgid bit
    before = {path: path.stat() for path, _, _ in specs}
    write_all(_changes(specs))
    for (path, _, new), mode in zip(specs, modes, strict=True):
        after = path.stat()
        assert path.read_bytes() == new
        assert after.st_ino != before[path].st_ino  # really replaced, not written in place
        assert stat.S_IMODE(after.st_mode) == mode
        if ROOT:
            assert (after.st_uid, after.st_gid) == (OTHER_UID, OTHER_GID)
        else:  # not root: our own files, and they stay ours
            assert (after.st_uid, after.st_gid) == (before[path].st_uid, before[path].st_gid)
    assert _leftovers(tmp_path) == []


@pytest.mark.skipif(not ROOT, reason="needs root to give a file another owner")
def test_owner_that_cannot_be_kept_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that could not chown (not root) must not silently take the file over."""
    specs = _files(tmp_path)
    os.chown(specs[2][0], OTHER_UID, OTHER_GID)
    before = {p: (p.read_bytes(), p.stat().st_ino) for p, _, _ in specs}

    def no_chown(fd, uid, gid):  # type: ignore[no-untyped-def]  # a stand-in for os.fchown
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(writer.os, "fchown", no_chown)
    with pytest.raises(WriteError, match="nothing written") as info:
        write_all(_changes(specs))
    assert str(specs[2][0]) in str(info.value)
    assert f"{OTHER_UID}:{OTHER_GID}" in str(info.value)
    assert {p: (p.read_bytes(), p.stat().st_ino) for p, _, _ in specs} == before
    assert _leftovers(tmp_path) == []


# --- read-only files --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555, 0o464])
@pytest.mark.parametrize("which", [0, 2])
def test_read_only_file_is_refused_even_as_root(tmp_path: Path, mode: int, which: int) -> None:
    specs = _files(tmp_path)
    read_only = specs[which][0]
    read_only.chmod(mode)
    before = {p: (p.read_bytes(), p.stat().st_ino) for p, _, _ in specs}
    with pytest.raises(WriteError, match="read-only") as info:
        write_all(_changes(specs))
    assert str(read_only) in str(info.value)
    assert "nothing written" in str(info.value)
    assert {p: (p.read_bytes(), p.stat().st_ino) for p, _, _ in specs} == before
    assert stat.S_IMODE(read_only.stat().st_mode) == mode
    assert _leftovers(tmp_path) == []


def test_file_the_user_cannot_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root: os.access (owner/group/other bits, ACLs) decides, as for any editor."""
    specs = _files(tmp_path)
    denied = specs[1][0]
    real_access = os.access

    def access(path, mode, **kwargs):  # type: ignore[no-untyped-def]  # a stand-in for os.access
        if Path(path) == denied and mode == os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(writer.os, "access", access)
    before = {p: p.read_bytes() for p, _, _ in specs}
    with pytest.raises(WriteError, match="no write permission") as info:
        write_all(_changes(specs))
    assert str(denied) in str(info.value)
    assert {p: p.read_bytes() for p, _, _ in specs} == before
    assert _leftovers(tmp_path) == []


def test_rollback_without_hard_links_restores_a_copy_with_owner_and_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where hard links are impossible the backup is a copy; a rollback still keeps the metadata."""
    specs = _files(tmp_path)
    first = specs[0][0]
    first.chmod(0o751)
    if ROOT:
        os.chown(first, OTHER_UID, OTHER_GID)
    real_replace = os.replace
    count = 0

    def no_link(src, dst, **kwargs):  # type: ignore[no-untyped-def]  # a stand-in for os.link
        raise OSError(1, "Operation not permitted", str(src))

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        nonlocal count
        count += 1
        if count == 2:
            raise OSError(5, "Input/output error", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "link", no_link)
    monkeypatch.setattr(writer.os, "replace", flaky_replace)
    with pytest.raises(WriteError, match="rolled back"):
        write_all(_changes(specs))
    monkeypatch.undo()
    for path, old, _ in specs:
        assert path.read_bytes() == old
    assert stat.S_IMODE(first.stat().st_mode) == 0o751
    if ROOT:
        assert (first.stat().st_uid, first.stat().st_gid) == (OTHER_UID, OTHER_GID)
    assert _leftovers(tmp_path) == []


# --- signals and a killed process -------------------------------------------------------------

CHILD = """
import json, os, signal, sys
from pathlib import Path
from pdguard import writer

spec = json.loads(sys.stdin.read())
sig, at = getattr(signal, spec["signal"]), spec["at"]

def hook(renamed):
    if renamed == at:
        os.kill(os.getpid(), sig)

writer._after_rename = hook
changes = [
    writer.FileChange(Path(p), bytes.fromhex(old), bytes.fromhex(new))
    for p, old, new in spec["files"]
]
try:
    writer.write_all(changes)
except KeyboardInterrupt:
    print("KeyboardInterrupt after write_all returned", flush=True)
    sys.exit(130)
print("write_all returned", flush=True)
"""


def _run_child(specs: list[tuple[Path, bytes, bytes]], sig: str, at: int) -> int:
    payload = {
        "signal": sig,
        "at": at,
        "files": [(str(p), old.hex(), new.hex()) for p, old, new in specs],
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode


def _journals(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.rglob(".pdguard-journal-*"))


@pytest.mark.parametrize("at", [0, 1, 2, 3])
def test_sigkill_leaves_a_journal_that_recovery_uses(tmp_path: Path, at: int) -> None:
    """Killed outright before/between/after the renames: recover() gets a consistent tree back."""
    specs = _files(tmp_path)
    specs[1][0].chmod(0o755)
    originals = {p: (old, p.stat().st_ino) for p, old, _ in specs}
    assert _run_child(specs, "SIGKILL", at) == -signal.SIGKILL

    # the kill really happened mid-commit: `at` files replaced, a journal next to the files
    # (in their common parent directory) naming every target, temporary file and backup
    for i, (path, old, new) in enumerate(specs):
        assert path.read_bytes() == (new if i < at else old)
    (journal,) = _journals(tmp_path)
    assert journal.parent == tmp_path
    record = json.loads(journal.read_text())
    assert [f["target"] for f in record["files"]] == [str(p) for p, _, _ in specs]
    for f in record["files"]:
        assert Path(f["temp"]).parent == Path(f["backup"]).parent == Path(f["target"]).parent
    assert _leftovers(tmp_path) != [journal]  # temporary files and backups are there too

    notes = recover(tmp_path)
    (note,) = notes
    assert str(journal) in note
    if at == len(specs):  # every rename had happened: the write is finished, not undone
        assert "finished" in note
        for path, _, new in specs:
            assert path.read_bytes() == new
    else:
        assert ("rolled back" if at else "cleaned up") in note
        for path, _, _ in specs:
            # byte-identical, and the very same inode (owner, mode, links all as before)
            assert (path.read_bytes(), path.stat().st_ino) == originals[path]
        assert stat.S_IMODE(specs[1][0].stat().st_mode) == 0o755
    assert _leftovers(tmp_path) == []
    assert recover(tmp_path) == []  # nothing left to do


def test_next_write_all_rolls_back_a_killed_run_then_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    specs = _files(tmp_path)
    assert _run_child(specs, "SIGKILL", 2) == -signal.SIGKILL
    with caplog.at_level(logging.WARNING, logger="pdguard.writer"):
        write_all(_changes(specs))
    assert any("rolled back (2 file(s) restored" in r.getMessage() for r in caplog.records)
    for path, _, new in specs:
        assert path.read_bytes() == new
    assert _leftovers(tmp_path) == []


def test_changes_planned_on_a_half_written_tree_are_refused(tmp_path: Path) -> None:
    """After a kill, a plan sees files 1-2 patched and only changes file 3. Writing just that
    after rolling 1-2 back would leave a half-patched tree: refuse, ask for a new run."""
    specs = _files(tmp_path)
    assert _run_child(specs, "SIGKILL", 2) == -signal.SIGKILL
    with pytest.raises(WriteError, match="run pdguard again") as info:
        write_all(_changes(specs[2:]))
    assert str(specs[0][0]) in str(info.value)
    for path, old, _ in specs:
        assert path.read_bytes() == old
    assert _leftovers(tmp_path) == []


def test_a_journal_held_by_a_live_run_is_left_alone(tmp_path: Path) -> None:
    specs = _files(tmp_path)
    assert _run_child(specs, "SIGKILL", 1) == -signal.SIGKILL
    (journal,) = _journals(tmp_path)
    fd = os.open(journal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as the run that is still writing would
        with pytest.raises(WriteError, match="another pdguard run"):
            write_all(_changes(specs))
        assert "running pdguard" in recover(tmp_path)[0]
        assert specs[0][0].read_bytes() == specs[0][2]  # untouched: not rolled back under it
        assert journal.exists()
    finally:
        os.close(fd)
    assert "rolled back" in recover(tmp_path)[0]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("forgery", ["world-writable", "other-owner", "outside", "garbage"])
def test_untrusted_journal_is_ignored(tmp_path: Path, forgery: str) -> None:
    """A journal is only acted on if this user wrote it, nobody else can write it, and it names
    files next to it. The forged journal is otherwise well formed: acted on, it would "restore"
    one.py from a planted file."""
    if forgery == "other-owner" and not ROOT:
        pytest.skip("needs root to give the journal another owner")
    specs = _files(tmp_path)
    (one, one_old, _), (two, _, _) = specs[0], specs[1]
    planted = one.with_name(f".{one.name}.x.orig.pdguard")
    planted.write_bytes(b"import os; os.system('echo pwned')\n")
    two_temp = two.with_name(f".{two.name}.x.new.pdguard")
    two_temp.write_bytes(b"")  # a temporary file still there: the journal reads as "roll back"
    files = [
        {
            "target": str(one),
            "temp": str(one.with_name(f".{one.name}.x.new.pdguard")),
            "backup": str(planted),
        },
        {
            "target": str(two),
            "temp": str(two_temp),
            "backup": str(two.with_name(f".{two.name}.x.orig.pdguard")),
        },
    ]
    journal = tmp_path / "a" / ".pdguard-journal-x.json"
    if forgery == "outside":  # a journal below the files' directory may not name them
        journal = tmp_path / "a" / "sub" / ".pdguard-journal-x.json"
        journal.parent.mkdir()
    journal.write_text("{not json" if forgery == "garbage" else json.dumps({"files": files}))
    journal.chmod(0o666 if forgery == "world-writable" else 0o600)
    if forgery == "other-owner":
        os.chown(journal, OTHER_UID, OTHER_GID)
    (note,) = recover(tmp_path)
    assert "ignored" in note
    assert one.read_bytes() == one_old
    assert journal.exists() and planted.exists()  # not ours to delete either


def test_failed_rollback_keeps_the_journal_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = _files(tmp_path)
    real_replace = os.replace
    count = 0

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        nonlocal count
        count += 1
        if count in (3, 4):  # the third rename fails, then putting the first file back fails
            raise OSError(5, "Input/output error", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", flaky_replace)
    with pytest.raises(WriteError, match="rollback incomplete"):
        write_all(_changes(specs))
    monkeypatch.undo()
    assert specs[0][0].read_bytes() == specs[0][2]  # still new: its rollback failed
    assert specs[1][0].read_bytes() == specs[1][1]  # put back
    assert len(_journals(tmp_path)) == 1
    assert "rolled back (1 file(s) restored" in recover(tmp_path)[0]
    for path, old, _ in specs:
        assert path.read_bytes() == old
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.parametrize("at", [0, 1, 2])
def test_signal_during_the_commit_waits_for_it(tmp_path: Path, sig: str, at: int) -> None:
    """SIGTERM/SIGINT/SIGHUP mid-commit: delivered once every file is replaced, never between."""
    specs = _files(tmp_path)
    code = _run_child(specs, sig, at)
    if sig == "SIGINT":
        assert code == 130  # KeyboardInterrupt, raised after write_all was done
    else:
        assert code == -getattr(signal, sig)  # the default action, after write_all was done
    for path, _, new in specs:
        assert path.read_bytes() == new
    assert _leftovers(tmp_path) == []


def test_recovery_note_reaches_stderr_without_any_logging_setup(tmp_path: Path) -> None:
    """The CLI sets up no logging: Python's last-resort handler must still print the note."""
    specs = _files(tmp_path)
    assert _run_child(specs, "SIGKILL", 1) == -signal.SIGKILL
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from pdguard.writer import FileChange, write_all\n"
        "write_all([FileChange(Path(p), bytes.fromhex(o), bytes.fromhex(n))"
        " for p, o, n in json.loads(sys.stdin.read())])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([(str(p), old.hex(), new.hex()) for p, old, new in specs]),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("pdguard: an interrupted write (journal ")
    assert "rolled back (1 file(s) restored" in line
    for path, _, new in specs:
        assert path.read_bytes() == new
    assert _leftovers(tmp_path) == []


def test_journal_killed_while_being_written_is_removed(tmp_path: Path) -> None:
    """Killed while writing the journal itself: nothing was staged yet, only the .part goes."""
    specs = _files(tmp_path)
    part = tmp_path / ".pdguard-journal-x.json.part"
    part.write_text('{"files": [{"tar')
    record = writer._record_path("x")  # what the killed run wrote first, in the state dir
    writer.write_private(record, writer._record(tmp_path / ".pdguard-journal-x.json", b""))
    (note,) = recover(tmp_path)
    assert "incomplete journal" in note
    for path, old, _ in specs:
        assert path.read_bytes() == old
    assert _leftovers(tmp_path) == []
    assert not record.exists()


def test_a_journal_with_no_record_in_the_state_dir_is_ignored(tmp_path: Path) -> None:
    """A journal (or .part) that this user owns but that no pdguard run of this user recorded
    (one committed to the tree, a checkout gives it to the user) is never acted on."""
    specs = _files(tmp_path)
    part = tmp_path / ".pdguard-journal-y.json.part"
    part.write_text("{}")
    (note,) = recover(tmp_path)
    assert "ignored: not written by pdguard" in note
    assert part.exists()
    for path, old, _ in specs:
        assert path.read_bytes() == old


def test_pdguard_apply_killed_mid_write_is_repaired_by_the_next_apply(tmp_path: Path) -> None:
    """End to end: `pdguard apply` SIGKILLed with everything staged; the next apply cleans up,
    says so on stderr, and writes the same bytes as an uninterrupted apply."""
    from pdguard.cli import main
    from tests.helpers import snapshot
    from tests.snippets import make_tree

    tree, clean = make_tree(tmp_path / "tree"), make_tree(tmp_path / "clean")
    assert main(["apply", str(clean)]) == 0
    before = snapshot(tree)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = (
        "import os, signal, sys\n"
        "from pdguard import writer\n"
        "from pdguard.cli import main\n"
        "writer._after_rename = lambda n: os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    cli = "import sys\nfrom pdguard.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    run = [sys.executable, "-c"]
    proc = subprocess.run(
        [*run, killed, "apply", str(tree)], env=env, timeout=120, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL
    assert len(_journals(tree)) == 1
    assert {k: v[0] for k, v in snapshot(tree).items() if "pdguard" not in k} == {
        k: v[0] for k, v in before.items()
    }
    proc = subprocess.run(
        [*run, cli, "apply", str(tree)], env=env, timeout=120, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "pdguard: an interrupted write" in proc.stderr
    assert "cleaned up (no file had been replaced yet)" in proc.stderr
    assert {k: v[0] for k, v in snapshot(tree).items()} == {
        k: v[0] for k, v in snapshot(clean).items()
    }
    assert _leftovers(tree) == []


@pytest.mark.parametrize("where", ["below", "above"])
def test_recover_finds_journals_below_and_above(tmp_path: Path, where: str) -> None:
    """recover(tree root) finds a journal deep in the tree; recover(a subdirectory) finds one
    in a parent directory."""
    specs = _files(tmp_path / "tree")
    assert _run_child(specs, "SIGKILL", 1) == -signal.SIGKILL
    assert _journals(tmp_path)[0].parent == tmp_path / "tree"
    (note,) = recover(tmp_path if where == "below" else tmp_path / "tree" / "b")
    assert "rolled back" in note
    for path, old, _ in specs:
        assert path.read_bytes() == old
    assert _leftovers(tmp_path) == []
