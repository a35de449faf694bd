"""No run of lines in this repository is copied from SGLang (``tests/own_words.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import RELEASES
from tests.own_words import CopiedRun, copied_runs, own_files, scan

UPSTREAM = frozenset(
    {
        "status = self.kv_mgr.check_status(self.bootstrap_room)",
        "if status in (KVPoll.Success, KVPoll.Failed):",
        "self.conclude_state = KVPoll.Failed",
        "self.kv_mgr.update_status(self.bootstrap_room, KVPoll.Failed)",
    }
)


def test_no_run_is_copied_from_the_releases() -> None:
    runs = scan(r.version for r in RELEASES)
    assert not runs, "\n".join(str(run) for run in runs)


def test_a_copied_run_is_found_and_explained_runs_are_accepted(tmp_path: Path) -> None:
    """The scanner itself: three copied lines are a run (indentation, blank and short lines
    do not matter; an own line breaks it); ``# own-words: <why>`` accepts one."""
    copied = (
        "    status = self.kv_mgr.check_status(self.bootstrap_room)\n\n"
        "    if status in (KVPoll.Success, KVPoll.Failed):\n"
        "        return status\n"
        "            self.conclude_state = KVPoll.Failed\n"
    )
    broken = copied.replace("return status", "state_seen_by_this_test = status")
    explained = "# own-words: mirrors the release's poll for the test\n" + copied
    unexplained = "# own-words:\n" + copied
    for name, text in (("copied", copied), ("broken", broken), ("explained", explained)):
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    (tmp_path / "unexplained.py").write_text(unexplained, encoding="utf-8")

    def runs(name: str) -> list[CopiedRun]:
        return copied_runs(tmp_path / f"{name}.py", UPSTREAM, tmp_path)

    [run] = runs("copied")
    assert (run.path, run.first, run.last, len(run.lines)) == ("copied.py", 1, 5, 3)
    assert runs("broken") == [] and runs("explained") == []
    assert [r.first for r in runs("unexplained")] == [2]  # a reason is required


def test_only_tracked_files_are_scanned(tmp_path: Path) -> None:
    """A ``venv/`` (or any untracked file) inside the clone is not the project's code."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "own.py").write_text("x = 1\n")
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    (tmp_path / "venv" / "lib" / "pip_module.py").write_text("y = 2\n")
    (tmp_path / "loose.py").write_text("z = 3\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "pkg/own.py"], check=True)
    assert [p.relative_to(tmp_path).as_posix() for p in own_files(tmp_path)] == ["pkg/own.py"]
    # outside a git checkout every file but tooling caches is read
    plain = tmp_path / "plain"
    (plain / ".venv").mkdir(parents=True)
    (plain / "a.py").write_text("a = 1\n")
    (plain / ".venv" / "b.py").write_text("b = 1\n")
    (plain / ".git").write_text("not a repository\n")  # git ls-files fails here
    assert [p.name for p in own_files(plain)] == ["a.py"]
