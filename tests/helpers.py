"""What several test modules share that is not a fixture (those are in tests/conftest.py): the
releases the release tests run on and their families' facts, copies of releases (patched or
not), tree snapshots, running the CLI in-process, and a git repository of real releases laid out
as upstream (``python/sglang/``, one commit and one annotated tag ``v<version>`` per release).

No SGLang source lives here: releases are fetched from PyPI (and cached) by vendor_sglang.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from pdguard.cli import main
from pdguard.commands import apply as pipeline
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release, load_manifest

# Every release pinned with ``ci = true`` (at least one per shape family), or all 62 with
# ``PDGUARD_ALL_RELEASES=1``; in version order.
RELEASES = [r for r in load_manifest() if r.ci or os.environ.get("PDGUARD_ALL_RELEASES") == "1"]
# apply refuses F1 (0.4.6 - 0.4.6.post4: the Failed branch raises): nothing to patch there.
PATCHABLE = [r for r in RELEASES if r.family != "F1"]

# Shape families (docs/releases.md) by what their KV senders do.
NIXL_STUCK = frozenset({"F3", "F4", "F5", "F6", "F7", "F8", "F9"})  # 0.4.7 - 0.5.17: NIXL's
# sender reports Bootstrapping with no bootstrap timeout (fixed upstream from 0.5.18, F10)
NIXL_NEVER_BOOTSTRAPPING = frozenset({"F1", "F2"})  # NIXL never reports Bootstrapping
# the inflight function takes the PP stages' consensus (rids_to_check): 0.4.7.post1+
PP_CONSENSUS = frozenset(f"F{n}" for n in range(4, 13))
MOONCAKE_STUCK = frozenset(  # Mooncake starts its bootstrap clock only in init()
    {
        "0.4.6",
        "0.4.6.post1",
        "0.4.6.post2",
        "0.4.6.post3",
        "0.4.6.post4",
        "0.4.6.post5",
        "0.4.7",
        "0.4.7.post1",
        "0.4.8",
    }
)


# What ``pdguard apply`` does to an unpatched release, per shape family: the status of each fix,
# sender-abort, inflight-deadline, sender-bootstrap-timeout. Some sender's poll() ignores abort()
# up to 0.5.12 (F1 - F7: the fake sender, NIXL up to 0.5.11, Mooncake up to 0.4.9.post4); F1's
# Failed branch raises (refused); NIXL and Mooncake need the bootstrap fix up to 0.5.17 (F2 -
# F9), 0.5.18 on has it upstream (F10 - F12).
FIXES = ("sender-abort", "inflight-deadline", "sender-bootstrap-timeout")
APPLY_STATUSES = {
    "F1": ("applied", "refused", "applied"),
    **{f"F{n}": ("applied", "applied", "applied") for n in range(2, 8)},
    **{f"F{n}": ("upstream", "applied", "applied") for n in range(8, 10)},
    **{f"F{n}": ("upstream", "applied", "upstream") for n in range(10, 13)},
}


def copy_release(version: str, dest: Path) -> Path:
    """A writable copy of a release's tree at ``dest``."""
    shutil.copytree(fetch_release(version), dest)
    return dest


def patched_copy(version: str, dest: Path) -> Path:
    """A copy of a release's tree at ``dest``, patched by ``pdguard apply``."""
    copy_release(version, dest)
    result = pipeline.plan(open_tree(dest))
    assert not result.refused
    pipeline.write(result)
    return dest


def copy_as_checkout(version: str, checkout: Path) -> Path:
    """The release's ``sglang`` package at ``checkout/python/sglang``, as upstream lays it out
    (replacing the package already there); returns the package directory."""
    package = checkout / "python" / "sglang"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(
        fetch_release(version) / "sglang", package, ignore=shutil.ignore_patterns("__pycache__")
    )
    return package


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file below ``root``: its bytes, mtime (ns) and mode, by relative path.

    Symlinks are recorded by their target, not followed."""
    found: dict[str, tuple[bytes, int, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = (str(path.readlink()).encode(), 0, 0)
        elif path.is_file():
            st = path.stat()
            found[rel] = (path.read_bytes(), st.st_mtime_ns, st.st_mode)
    return found


def file_bytes(root: Path) -> dict[str, bytes]:
    """Every regular file's bytes below ``root`` (no mtimes), by relative path."""
    return {rel: data for rel, (data, _, _) in snapshot(root).items()}


def run_main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """``pdguard ARGS`` in-process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """stderr of a failed run: exactly one ``pdguard: error: ...`` line, returned."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pdguard: error: "), err
    return lines[0]


GIT_CONFIG = {
    "user.name": "Test Maintainer",
    "user.email": "maintainer@example.com",
    "commit.gpgsign": "false",
    "tag.gpgsign": "false",
    "core.autocrlf": "false",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )
    return done.stdout.strip()


def pdguard(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The whole command, as a user runs it (stderr a pipe: never a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "pdguard", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )


def init_repo(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    for key, value in GIT_CONFIG.items():
        git(repo, "config", key, value)
    return repo


def commit_releases(repo: Path, versions: Iterable[str]) -> None:
    """One commit and one annotated tag ``v<version>`` per release, in the given order."""
    if not (repo / "README.md").exists():
        (repo / "README.md").write_text("SGLang, as upstream lays it out (python/sglang/)\n")
    for version in versions:
        package = repo / "python/sglang"
        shutil.rmtree(package, ignore_errors=True)
        shutil.copytree(
            fetch_release(version) / "sglang",
            package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"sglang {version}")
        git(repo, "tag", "-a", "-m", f"release {version}", f"v{version}")


def release_repo(repo: Path, versions: Iterable[str]) -> Path:
    """A new repository at ``repo`` holding ``versions`` as tagged commits on ``main``."""
    init_repo(repo)
    commit_releases(repo, versions)
    return repo
