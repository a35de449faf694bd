"""pdguard's pre-commit hooks (``.pre-commit-hooks.yaml``), run by real pre-commit.

An SGLang checkout laid out as upstream does (``python/sglang/...``, release 0.5.14 fetched from
PyPI through vendor_sglang) is committed to a temporary git repo whose
``.pre-commit-config.yaml`` points at a committed snapshot of this working tree.  pre-commit then
builds the hook's virtualenv itself (pip installs pdguard from that snapshot, so this needs
PyPI) and runs it:

1. ``pdguard-check`` fails on the unpatched release and shows PDG001 and PDG004;
2. ``pdguard-apply`` (a manual-stage fixer here) patches the tree, and pre-commit reports the
   modification as a failure, as it does for every fixer;
3. ``pdguard-check`` then passes, and is skipped when no disaggregation file is involved.

The first pre-commit run creates the virtualenv: expect a minute or two.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.helpers import copy_as_checkout
from tests.paths import ROOT

pytestmark = pytest.mark.releases

REPO_ROOT = ROOT
RELEASE = "0.5.14"
PRE_COMMIT_TIMEOUT = 900  # seconds; the first run pip installs pdguard into a new virtualenv

# Never part of the hook repo snapshot: VCS data, virtualenvs, build output, caches (a fetched
# release cache may live in .cache/).
_SNAPSHOT_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    ".cache",
)


def _init_repo(path: Path) -> git.Repo:
    repo = git.Repo.init(path)
    with repo.config_writer() as config:
        config.set_value("user", "name", "pdguard tests")
        config.set_value("user", "email", "pdguard-tests@example.invalid")
        config.set_value("commit", "gpgsign", "false")
    return repo


def _commit_all(repo: git.Repo, message: str) -> str:
    repo.git.add("--all")
    repo.git.commit("--quiet", "--no-verify", "-m", message)
    return repo.head.commit.hexsha


def _hook_repo(dest: Path) -> str:
    """Commit a snapshot of this working tree (uncommitted edits included) to ``dest``."""
    for name in ("pyproject.toml", ".pre-commit-hooks.yaml", "pdguard/cli.py"):
        assert (REPO_ROOT / name).is_file(), f"{REPO_ROOT} is not pdguard's working tree"
    shutil.copytree(REPO_ROOT, dest, ignore=_SNAPSHOT_IGNORE)
    return _commit_all(_init_repo(dest), "pdguard working tree snapshot")


def _pre_commit_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # GIT_*: we may run inside a git hook; SKIP would make pre-commit skip our hook.
        if not key.startswith(("GIT_", "PRE_COMMIT")) and key != "SKIP"
    }
    env["PRE_COMMIT_HOME"] = str(home)
    return env


def _run_pre_commit(repo: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--color", "never", *args],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=PRE_COMMIT_TIMEOUT,
        check=False,
    )
    return result.returncode, result.stdout


def _hook_line(output: str, name: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(name)]
    assert len(lines) == 1, f"expected one status line for {name!r}:\n{output}"
    return lines[0]


def test_pre_commit_hooks_on_release(tmp_path: Path) -> None:
    version = subprocess.run(
        [sys.executable, "-m", "pre_commit", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert version.returncode == 0, (
        "pre-commit is a test dependency: pip install -e '.[test]'\n" + version.stderr
    )

    hook_rev = _hook_repo(tmp_path / "pdguard-hooks")

    checkout = tmp_path / "sglang"
    copy_as_checkout(RELEASE, checkout)
    prefill = checkout / "python/sglang/srt/disaggregation/prefill.py"
    assert prefill.is_file()
    # JSON strings are YAML strings: no quoting surprises from the temporary path.
    (checkout / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {json.dumps(str(tmp_path / 'pdguard-hooks'))}\n"
        f"    rev: {json.dumps(hook_rev)}\n"
        "    hooks:\n"
        "      - id: pdguard-check\n"
        # The prefill rules: ``apply`` fixes the prefill side only, and the decode rules
        # (PDG006/PDG007) still report 0.5.14's decode queues after it.
        '        args: [".", "--select", "PDG001,PDG002,PDG003,PDG004,PDG005"]\n'
        "      - id: pdguard-apply\n"
        "        stages: [manual]\n"
    )
    checkout_repo = _init_repo(checkout)
    _commit_all(checkout_repo, f"sglang {RELEASE}")

    env = _pre_commit_env(tmp_path / "pre-commit-home")
    check_name = "pdguard check"

    # 1. The unpatched release fails, with both kinds of finding in the hook's output.
    code, output = _run_pre_commit(checkout, env, "--all-files")
    assert code == 1, output
    assert _hook_line(output, check_name).endswith("Failed"), output
    assert "PDG001" in output, output
    assert "PDG004" in output, output
    # The fixer is manual-stage: not run by default.
    assert not any(line.startswith("pdguard apply") for line in output.splitlines()), output

    # 2. The fixer hook patches the tree; pre-commit fails any hook that modifies files.
    before = prefill.read_bytes()
    code, output = _run_pre_commit(
        checkout, env, "--all-files", "--hook-stage", "manual", "pdguard-apply"
    )
    assert code == 1, output
    assert _hook_line(output, "pdguard apply").endswith("Failed"), output
    assert "files were modified by this hook" in output, output
    assert prefill.read_bytes() != before
    changed = {item.a_path for item in checkout_repo.index.diff(None)}
    assert "python/sglang/srt/disaggregation/prefill.py" in changed, changed

    # 3. The patched tree passes ...
    code, output = _run_pre_commit(checkout, env, "--all-files")
    assert code == 0, output
    assert _hook_line(output, check_name).endswith("Passed"), output

    # ... and the hook does not run at all when no disaggregation file is involved.
    code, output = _run_pre_commit(checkout, env, "--files", ".pre-commit-config.yaml")
    assert code == 0, output
    assert _hook_line(output, check_name).endswith("Skipped"), output
