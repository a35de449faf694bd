"""The version of SGLang at a git commit that holds no version file: from its tags, as
setuptools-scm (which SGLang builds with from 0.5.9, writing ``_version.py`` only into a build)
names it. ``v0.5.9`` itself is ``0.5.9``; three commits after it, ``0.5.10.dev3+g1234abcd``;
with no tag reachable, setuptools-scm's own ``0.1.dev<commits>+g<sha>``."""

from __future__ import annotations

import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

# git describe's long form: TAG-DISTANCE-gNODE
_DESCRIBE = re.compile(r"^(?P<tag>.+)-(?P<distance>\d+)-g(?P<node>[0-9a-f]+)$")


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _configuration(directory: Path) -> Any:
    from setuptools_scm import Configuration

    return Configuration(root=str(directory), local_scheme="node-and-date")


def tag_version(directory: Path, rev: str = "HEAD") -> str | None:
    """The version setuptools-scm gives commit ``rev`` of the repository at ``directory``
    (None when it is no git repository or the commit is unknown). setuptools-scm 10 warns that
    a configuration should come from vcs-versioning's environment, whose ``build_config``
    reads the current directory's pyproject.toml, not the target's: the warning is muted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _tag_version(directory, rev)


def _tag_version(directory: Path, rev: str) -> str | None:
    from setuptools_scm.version import format_version, meta

    config = _configuration(directory)
    described = _git(directory, "describe", "--tags", "--long", "--match", "*[0-9]*", rev)
    match = _DESCRIBE.match(described or "")
    if match is not None:
        distance, short = int(match["distance"]), f"g{match['node']}"
        try:
            return format_version(meta(match["tag"], distance=distance, node=short, config=config))
        except Exception:  # a tag that is no version (setuptools-scm raises its own errors)
            pass
    node = _git(directory, "rev-parse", "--short=8", rev)
    count = _git(directory, "rev-list", "--count", rev)
    if node is None or count is None:
        return None
    return format_version(meta("0.0", distance=int(count), node=f"g{node}", config=config))
