"""Shared by the tests that need a git repository of real SGLang releases (``test_verify``,
``test_workflow``, ``test_readme``): laid out as upstream (``python/sglang/``), one commit and
one annotated tag ``v<version>`` per release, the trees fetched by vendor_sglang."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from pdguard.vendor_sglang import fetch_release

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
