"""One run owns every cache (``pdguard.run.Run``, docs/architecture.md "A run"): git objects,
inserted snippets, verify's repositories and settings are the run's, and two runs in one
process share nothing; the ``git cat-file`` readers, a process resource, are stopped on
request (and at exit)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from pdguard import git_objects
from pdguard.codemods.insertion import editing, parse_statements
from pdguard.commands import verify as verifying
from pdguard.git_tree import open_git_tree, open_repo
from pdguard.run import Run
from tests.helpers import git, init_repo
from tests.snippets import PREFILL_REL, make_tree


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits, ``one`` and ``two``: the second changes prefill.py only."""
    repo = init_repo(tmp_path / "repo")
    make_tree(repo / "python")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "one")
    prefill = repo / "python" / PREFILL_REL
    prefill.write_text(prefill.read_text() + "\n# two\n")
    git(repo, "commit", "-q", "-am", "two")
    git(repo, "tag", "two")
    return repo


def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The object ids read from git, in order."""
    seen: list[str] = []
    real = git_objects.CatFile.read

    def read(self: git_objects.CatFile, hexsha: str) -> tuple[str, bytes]:
        seen.append(hexsha)
        return real(self, hexsha)

    monkeypatch.setattr(git_objects.CatFile, "read", read)
    return seen


def read_all(repo: Path, ref: str, run: Run) -> None:
    tree = open_git_tree(open_repo(str(repo)), ref, run=run)
    for rel in tree.python_files("sglang/srt/disaggregation"):
        tree.read_bytes(rel)


def test_git_objects_are_kept_in_the_run_and_not_across_runs(repo: Path, monkeypatch) -> None:
    seen = reads(monkeypatch)
    run = Run()
    read_all(repo, "one", run)
    first = len(seen)
    assert first and len(run.git_blobs) and len(run.git_trees)
    read_all(repo, "two", run)  # the same run: only what changed is read again
    again = seen[first:]
    assert 0 < len(again) < first and len(set(again)) == len(again)
    read_all(repo, "one", Run())  # another run reads everything itself
    assert len(seen) - first - len(again) == first


def test_a_snippet_is_parsed_once_a_run_and_handed_out_once_a_module() -> None:
    config = cst.parse_module("").config_for_parsing
    code = "x = 1\n"
    outside = parse_statements(code, config)
    assert parse_statements(code, config)[0] is not outside[0]  # no run: parsed each time
    run = Run()
    with editing(run):
        first = parse_statements(code, config)
        second = parse_statements(code, config)  # the same module: nodes of its own
    assert second[0] is not first[0]
    with editing(run):  # another module of the run: the run's parse
        assert parse_statements(code, config)[0] is first[0]
    with editing(Run()):  # another run shares nothing
        assert parse_statements(code, config)[0] is not first[0]
    assert len(run.snippets) == 1


def test_a_verify_lane_opens_its_repository_once_and_closes_it_with_the_run(
    repo: Path, monkeypatch
) -> None:
    closed: list[object] = []
    with Run() as run:
        for ref in ("one", "two"):
            report = verifying._verify_git_ref(str(repo), None, ref, run)
            assert report.error is None, report.error
        (opened,) = run.repos.values()
        monkeypatch.setattr(opened, "close", lambda: closed.append(opened))
    assert closed == [opened] and not run.repos


def test_confirm_is_the_runs_setting() -> None:
    run = Run(hollow=False, confirm=True)
    lane = Run.of(run.settings())
    assert (lane.hollow, lane.confirm) == (False, True) and lane is not run
    assert not Run().confirm


def test_the_readers_are_stopped_on_request(repo: Path) -> None:
    read_all(repo, "one", Run())
    (reader,) = git_objects._READERS.values()
    proc = reader._proc
    assert proc is not None and proc.poll() is None
    git_objects.close_readers()
    assert proc.poll() is not None and not git_objects._READERS
