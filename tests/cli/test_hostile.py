"""Hostile trees and repositories (``tests/hostile/build.py``), run as a user runs pdguard: each
ends with exit 2 and one stderr line naming the file, the tree unchanged, no secret of the
environment printed, and no hang (every run has a timeout)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pdguard.git_objects import CatFile, ObjectError
from pdguard.sglang_names import DECODE_PATH, DISAGGREGATION_DIR, PREFILL_PATH
from pdguard.vendor_sglang import fetch_release
from tests.helpers import git, release_repo, snapshot
from tests.hostile.build import DIRECTORY_CASES, SECRET, SECRET_ENV, VERSION, forge_journal

TIMEOUT = 120  # seconds: a run that takes longer is a hang


def _run(*args: str, cwd: Path | None = None, limit_file_size: int | None = None):
    env = {**os.environ, SECRET_ENV: SECRET, "PDGUARD_NO_CACHE": "1"}

    def limits() -> None:
        if limit_file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    proc = subprocess.run(
        [sys.executable, "-m", "pdguard", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=TIMEOUT,
        preexec_fn=limits,
    )
    assert SECRET not in proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _one_line(proc: subprocess.CompletedProcess[str], names: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pdguard: error: ") and names in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def release() -> Path:
    return fetch_release(VERSION)


@pytest.mark.parametrize("name", sorted(DIRECTORY_CASES))
def test_hostile_tree(name: str, release: Path, tmp_path: Path) -> None:
    case = DIRECTORY_CASES[name]
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(release, tree, symlinks=True)
    case.mutate(tree, outside)
    before = snapshot(tree)
    proc = _run(*(a.replace("{tree}", str(tree)) for a in case.args))
    if case.code == 2:
        _one_line(proc, case.names)
    else:
        assert proc.returncode == case.code, proc.stderr
    assert snapshot(tree) == before


def test_forged_journal_is_not_obeyed_by_apply(release: Path, tmp_path: Path) -> None:
    """A real run ignores a journal no pdguard run of this user recorded (says so) and
    patches the tree; prefill.py never becomes the file the journal names."""
    tree = tmp_path / "tree"
    shutil.copytree(release, tree)
    forge_journal(tree, tmp_path)
    proc = _run("apply", str(tree))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("ignored: not written by pdguard") == 1  # said once, not per look
    prefill = (tree / PREFILL_PATH).read_text()
    assert "os.system" not in prefill and prefill != (release / PREFILL_PATH).read_text()
    assert (tree / DISAGGREGATION_DIR / ".pdguard-journal-x.json").exists()  # not ours either


def test_a_file_size_limit_names_the_file(release: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(release, tree)
    before = snapshot(tree)
    line = _one_line(_run("apply", str(tree), limit_file_size=20_000), "")
    assert "File too large" in line and f"{tree}/sglang/srt/" in line
    assert snapshot(tree) == before


@pytest.mark.parametrize("jobs", ["0", "65", "100000", "-1", "x"])
def test_jobs_is_bounded(jobs: str, tmp_path: Path) -> None:
    proc = _run("verify", "--pypi", VERSION, "--jobs", jobs)
    assert proc.returncode == 2 and "--jobs" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_forged_cache_entries_are_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry is believed only with the right keyed hash, in a directory only this user can
    write."""
    from pdguard.cache import ResultCache

    monkeypatch.setenv("PDGUARD_STATE", str(tmp_path / "state"))
    store = ResultCache(tmp_path / "cache")
    key = store.key("check", ["x"])
    store.put(key, {"findings": [], "suppressed": 0})
    assert store.get(key) == {"findings": [], "suppressed": 0}
    path = store._path(key)
    entry = json.loads(path.read_text())
    entry["value"] = {"findings": [], "suppressed": 1}  # forged: the hash no longer matches
    path.write_text(json.dumps(entry))
    assert store.get(key) is None
    del entry["mac"]
    path.write_text(json.dumps(entry))
    assert store.get(key) is None
    store.put(key, {"findings": [], "suppressed": 0})
    assert store.get(key) is not None
    (tmp_path / "cache").chmod(0o777)  # anyone may plant entries: none is believed
    assert store.get(key) is None
    (tmp_path / "cache").chmod(0o700)
    assert store.get(key) is not None
    other = ResultCache(tmp_path / "cache")
    monkeypatch.setenv("PDGUARD_STATE", str(tmp_path / "another-user"))
    assert other.get(key) is None  # another key: another user's entries are misses


# -- git repositories -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return release_repo(tmp_path_factory.mktemp("hostile") / "repo", [VERSION])


@pytest.fixture
def repo(pristine_repo: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(pristine_repo, copy, symlinks=True)
    return copy


def _corrupt(repo: Path, rel: str) -> str:
    """Truncate the loose object of ``rel`` at the tag: zlib data that stops half-way."""
    sha = git(repo, "rev-parse", f"v{VERSION}:{rel}")
    path = repo / ".git" / "objects" / sha[:2] / sha[2:]
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data[: len(data) // 2])
    return sha


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_corrupt_object_is_an_error_row_naming_ref_file_and_object(repo: Path, jobs: str) -> None:
    sha = _corrupt(repo, f"python/{PREFILL_PATH}")
    proc = _run("verify", "--repo", str(repo), "--ref", f"v{VERSION}", "--jobs", jobs)
    line = _one_line(proc, f"v{VERSION}:python/{PREFILL_PATH}")
    assert sha in line
    assert proc.stdout.strip()  # the table, with the error row


def test_carry_on_a_corrupt_object_names_it(repo: Path) -> None:
    sha = _corrupt(repo, f"python/{PREFILL_PATH}")
    proc = _run("carry", "--repo", str(repo), "--onto", f"v{VERSION}", "--branch", "fixed")
    assert sha in _one_line(proc, f"python/{PREFILL_PATH}")
    assert "fixed" not in git(repo, "branch", "--list")


def _restate_size(repo: Path, spec: str, extra: int) -> str:
    """Rewrite the loose object ``spec`` names with a header that states ``extra`` bytes more
    than the object holds (valid zlib: only the header lies)."""
    sha = git(repo, "rev-parse", spec)
    path = repo / ".git" / "objects" / sha[:2] / sha[2:]
    header, body = zlib.decompress(path.read_bytes()).split(b"\0", 1)
    path.chmod(0o644)
    kind = header.split()[0]
    path.write_bytes(zlib.compress(b"%s %d\0" % (kind, len(body) + extra) + body))
    return sha


def test_an_object_whose_header_states_a_huge_size_is_an_error_row_at_once(repo: Path) -> None:
    """GitPython's reader waited forever for the 99 MB git never sends."""
    sha = _restate_size(repo, f"v{VERSION}:python/{PREFILL_PATH}", 99_000_000)
    proc = _run("verify", "--repo", str(repo), "--ref", f"v{VERSION}", "--jobs", "1")
    line = _one_line(proc, f"v{VERSION}:python/{PREFILL_PATH}")
    assert sha in line and "states" in line


def test_a_commit_whose_header_states_a_huge_size_is_an_error_row_at_once(repo: Path) -> None:
    sha = _restate_size(repo, f"v{VERSION}^{{commit}}", 99_000_000)
    proc = _run("verify", "--repo", str(repo), "--ref", f"v{VERSION}", "--jobs", "1")
    line = _one_line(proc, f"v{VERSION}: git object {sha}")
    assert "states 990" in line


def test_an_object_a_little_shorter_than_its_header_ends_the_read_not_the_run(repo: Path) -> None:
    """The stated size is plausible: the read stalls, and the stall deadline ends it; the next
    read gets a new ``git cat-file`` (no leftovers of the broken object)."""
    sha = _restate_size(repo, f"v{VERSION}:python/{PREFILL_PATH}", 100)
    reader = CatFile(str(repo / ".git"), stall_seconds=0.5)
    with pytest.raises(ObjectError, match=r"sent nothing for 0\.5 s"):
        reader.read(sha)
    other = git(repo, "rev-parse", f"v{VERSION}:python/{DECODE_PATH}")
    kind, data = reader.read(other)
    shown = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", other], capture_output=True)
    assert kind == "blob" and data == shown.stdout


def _commit_entry(repo: Path, mode: str, sha: str, rel: str) -> None:
    """A commit on top of the tag whose tree holds ``rel`` as ``mode`` (a symlink, a gitlink)."""
    git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{sha},{rel}")
    git(repo, "commit", "-q", "-m", "hostile entry")
    git(repo, "tag", "hostile")


@pytest.mark.parametrize(
    ("mode", "rel"),
    [
        ("120000", f"python/{DISAGGREGATION_DIR}/evil.py"),  # a symlink
        ("160000", f"python/{DISAGGREGATION_DIR}/vendored"),  # a submodule
        ("120000", "python/setup.cfg"),  # a settings file isort would read
    ],
)
def test_git_symlinks_and_gitlinks_are_error_rows(repo: Path, mode: str, rel: str) -> None:
    if mode == "120000":  # the link's target is its blob
        done = subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
            input="/proc/self/environ",
            capture_output=True,
            text=True,
            check=True,
        )
        sha = done.stdout.strip()
    else:
        sha = git(repo, "rev-parse", "HEAD")
    _commit_entry(repo, mode, sha, rel)
    proc = _run("verify", "--repo", str(repo), "--ref", "hostile", "--format", "json")
    _one_line(proc, f"hostile:{rel}")
    (report,) = json.loads(proc.stdout)
    assert set(report["fixes"].values()) == {"error"}  # never "upstream"


def test_carry_refuses_a_branch_another_worktree_has(repo: Path, tmp_path: Path) -> None:
    git(repo, "branch", "feature", f"v{VERSION}")
    worktree = tmp_path / "feature"
    git(repo, "worktree", "add", "-q", str(worktree), "feature")
    before = git(repo, "rev-parse", "feature")
    proc = _run(
        "carry", "--repo", str(repo), "--onto", f"v{VERSION}", "--branch", "feature", "--force"
    )
    assert str(worktree) in _one_line(proc, "feature")
    assert git(repo, "rev-parse", "feature") == before
    assert git(worktree, "status", "--porcelain") == ""
