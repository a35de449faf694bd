"""``check --confirm`` on every hostile tree of ``tests/hostile/build.py`` (copies of 0.5.14,
which waits for ever unpatched), run as a user runs it: a subprocess with a planted secret.

Ground truth: each tree still wedges (no inflight deadline), so ``check --confirm`` never
prints "All checks passed!"; it exits 1 with the static findings, or 2 with one line naming
the file where the tree cannot be read (the case's own ``check`` ground truth); nothing is
written, no secret printed, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard.vendor_sglang import fetch_release
from tests.hostile.build import DIRECTORY_CASES, SECRET, SECRET_ENV, VERSION

TIMEOUT = 300  # seconds: check, then the simulation's child (its own wall clock is 180 s)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            found[str(path)] = (0, 0)
            continue
        stat = path.stat()
        found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


def run_confirm(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SECRET_ENV: SECRET, "PDGUARD_NO_CACHE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pdguard", "check", "--confirm", "--no-cache", str(tree)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )


def expected_exit(name: str) -> int | None:
    """The case's own ground truth where it is written for ``check``; None where it is
    written for another command (then 1 or 2: the tree is judged or refused, never passed)."""
    case = DIRECTORY_CASES[name]
    return case.code if case.args[0] == "check" else None


@pytest.mark.releases
@pytest.mark.parametrize("name", sorted(DIRECTORY_CASES))
def test_check_confirm_on_a_hostile_tree(name: str, tmp_path: Path) -> None:
    case = DIRECTORY_CASES[name]
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(fetch_release(VERSION), tree, symlinks=True)
    case.mutate(tree, outside)
    before = _snapshot(tree)
    proc = run_confirm(tree)
    shown = proc.stdout + proc.stderr
    assert SECRET not in shown and "Traceback" not in shown, shown
    assert "All checks passed!" not in proc.stdout, proc.stdout
    assert _snapshot(tree) == before  # nothing written
    wanted = expected_exit(name)
    if wanted is not None:
        assert proc.returncode == wanted, (proc.returncode, proc.stderr)
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    if proc.returncode == 2:
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pdguard: error: "), proc.stderr
        assert case.names in lines[0], lines[0]
    else:
        assert "PDG001" in proc.stdout  # the static verdict: it waits for ever
