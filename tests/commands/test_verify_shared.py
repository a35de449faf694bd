"""``verify`` does what distinct trees need, not what refs number: refs whose commits have the
same tree are analysed once per run, with the result cache or without (``verify_git``), and
each ref gets the report with its own name and commit. Counted by ``verify_tree``'s calls, the
analysis of one tree, in one process (``--jobs 1``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pdguard import cache, git_tree
from pdguard.cli import main
from pdguard.commands import verify as verifying
from tests.snippets import make_tree


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """300 tags on one commit (``same/000`` ...) and ``other``, a commit with another tree."""
    repo = tmp_path / "repo"
    make_tree(repo / "python")
    git(repo, "init", "-q", "-b", "main")
    for key, value in {"user.name": "t", "user.email": "t@example.com"}.items():
        git(repo, "config", key, value)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    git(
        repo,
        "update-ref",
        "--stdin",
        stdin="".join(f"create refs/tags/same/{n:03d} HEAD\n" for n in range(300)),
    )
    (repo / "python/sglang/srt/environ.py").write_text("X = 1\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two")
    git(repo, "tag", "-a", "-m", "annotated", "other")
    return repo


@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The refs ``verify_tree`` analysed, and ``resolve_refs`` spied on too."""
    calls: list[str] = []
    real_verify, real_resolve = verifying.verify_tree, git_tree.resolve_refs

    def verify_tree(tree, ref, commit, run=None):  # type: ignore[no-untyped-def]  # its signature
        calls.append(ref)
        return real_verify(tree, ref, commit, run)

    def resolve_refs(repo, refs):  # type: ignore[no-untyped-def]  # resolve_refs' signature
        calls.append(f"resolve {len(refs)}")
        return real_resolve(repo, refs)

    monkeypatch.setattr(verifying, "verify_tree", verify_tree)
    monkeypatch.setattr(git_tree, "resolve_refs", resolve_refs)
    return calls


def verify(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    code = main(["verify", *(str(a) for a in args), "--jobs", "1", "--format", "json"])
    out, err = capsys.readouterr()
    assert not err
    return code, out


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache"])
def test_300_refs_on_one_commit_analyse_its_tree_once(
    repo: Path, analysed: list[str], capsys, tmp_path: Path, monkeypatch, cached: bool
) -> None:
    if cached:  # an empty cache of its own (conftest turns the cache off)
        monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
        monkeypatch.setenv("PDGUARD_CACHE", str(tmp_path / "cache"))
    code, out = verify(capsys, "--repo", repo, "--tags", "*")
    assert analysed == ["resolve 301", "other", "same/000"]  # tags in name order
    reports = json.loads(out)
    assert [r["ref"] for r in reports] == ["other", *(f"same/{n:03d}" for n in range(300))]
    one = git(repo, "rev-parse", "same/000").strip()
    assert {r["commit"] for r in reports[1:]} == {one}
    assert reports[0]["commit"] == git(repo, "rev-parse", "other^{commit}").strip() != one
    # each ref's report is the first one's, under its own name
    assert all({**r, "ref": "same/000"} == reports[1] for r in reports[1:])
    assert reports[1]["fixes"]["inflight-deadline"] == "applicable"
    # the same bytes as every ref verified alone
    for ref in ("same/000", "same/299", "other"):
        _, alone = verify(capsys, "--repo", repo, "--ref", ref, "--no-cache")
        assert json.loads(alone) == [r for r in reports if r["ref"] == ref]
    analysed.clear()
    again = verify(capsys, "--repo", repo, "--tags", "*")
    assert again == (code, out)
    assert analysed == ["resolve 301"] if cached else ["resolve 301", "other", "same/000"]


def test_refs_that_name_no_commit_are_rows_of_their_own(
    repo: Path, analysed: list[str], capsys
) -> None:
    """An unknown ref, a tag of a tree: one batch asks git, and each is an error row named by
    itself (as when GitPython resolves it alone)."""
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    git(repo, "tag", "a-tree", tree)
    resolved = git_tree.resolve_refs(
        git_tree.open_repo(str(repo)), ["same/001", "nope", "a-tree", "other", "", "x\ny"]
    )
    assert resolved["same/001"] == (
        git(repo, "rev-parse", "same/001").strip(),
        tree_of(repo, "same/001"),
    )
    assert resolved["other"] == (git(repo, "rev-parse", "other^{commit}").strip(), tree)
    assert [resolved[r] for r in ("nope", "a-tree", "", "x\ny")] == [None] * 4
    refs = ("--ref", "nope", "--ref", "a-tree", "--ref", "same/001")
    code = main(["verify", "--repo", str(repo), *refs, "--jobs", "1", "--format", "json"])
    out, err = capsys.readouterr()
    assert err.count("pdguard: error: ") == 2
    assert code == 2
    errors = {r["ref"]: r["error"] for r in json.loads(out)}
    assert errors["same/001"] is None
    assert errors["nope"].startswith("nope: unknown ref")
    assert errors["a-tree"] == "a-tree: points at a tree, not a commit"


def tree_of(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", f"{ref}^{{tree}}").strip()
