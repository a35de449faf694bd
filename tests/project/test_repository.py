"""The repository itself: no tracked file holds a git merge-conflict marker (as pre-commit's
check-merge-conflict sees them: a line that starts with one), so none ships in a docstring,
``pdguard rule`` or SARIF again."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.paths import ROOT

MARKER = re.compile(rb"^(?:<<<<<<< |>>>>>>> |=======\r?$)", re.M)


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def markers(data: bytes) -> list[int]:
    """The 1-based lines of ``data`` that start with a conflict marker."""
    return [data.count(b"\n", 0, m.start()) + 1 for m in MARKER.finditer(data)]


def test_no_tracked_file_holds_a_conflict_marker() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): lines
        for path in tracked_files()
        if path.is_file() and not path.is_symlink() and (lines := markers(path.read_bytes()))
    }
    assert not found, found


def test_markers_are_found() -> None:
    text = b'"""doc\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> ud\n"""\n'
    assert markers(text) == [2, 4, 6]
    assert markers(b"x = '======='\n# >>>>>>>\n") == []
