"""pdguard.writer.write_all: atomic, all-or-nothing replacement of several files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pdguard import writer
from pdguard.writer import FileChange, WriteError, write_all


def _files(tmp_path: Path) -> list[tuple[Path, bytes, bytes]]:
    """Three files in two directories: (path, old bytes, new bytes)."""
    (tmp_path / "a").mkdir()
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
    return sorted(tmp_path.rglob("*.pdguard"))


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


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600, 0o444])
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

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]
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

    def flaky_replace(src, dst):  # type: ignore[no-untyped-def]
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
    real_chmod = os.chmod
    count = 0

    def flaky_chmod(path, mode):  # type: ignore[no-untyped-def]
        nonlocal count
        count += 1
        if count == 3:  # staging the third file
            raise OSError(5, "Input/output error", str(path))
        return real_chmod(path, mode)

    monkeypatch.setattr(writer.os, "chmod", flaky_chmod)
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

    def spy_replace(src, dst):  # type: ignore[no-untyped-def]
        seen.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", spy_replace)
    write_all(_changes(specs))
    assert [dst for _, dst in seen] == [path for path, _, _ in specs]
    for src, dst in seen:
        assert src.parent == dst.parent  # same directory: same file system, atomic rename
        assert src.name.endswith(".pdguard")
    assert _leftovers(tmp_path) == []
