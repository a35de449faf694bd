"""A fix that was partly removed: ``apply`` refuses and names the command that restores it,
``apply --repair`` restores it from a pristine copy (the last commit, or the release's wheel),
and refuses when that would lose a change that is not pdguard's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard.fix_names import INFLIGHT_HELPER
from tests.helpers import copy_release, git, init_repo, one_error_line, run_main, snapshot
from tests.snippets import PREFILL_REL, make_tree

CALL = f"self.{INFLIGHT_HELPER}("


def remove_the_call(prefill: Path) -> None:
    """Take one piece of inflight-deadline out: the helper's call in the inflight loop."""
    lines = prefill.read_text().splitlines(True)
    calls = [line for line in lines if CALL in line and "def " not in line]
    assert len(calls) == 1
    prefill.write_text("".join(line for line in lines if line not in calls))


@pytest.fixture
def committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git checkout of the snippet tree (committed unpatched), patched, then a piece of the
    fix removed."""
    monkeypatch.chdir(tmp_path)
    tree = make_tree(init_repo(tmp_path / "tree"))
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "release")
    assert run_main_quiet("apply", "tree") == 0
    remove_the_call(tree / PREFILL_REL)
    return tree


def run_main_quiet(*args: str) -> int:
    from pdguard.cli import main

    return main(list(args))


def test_apply_names_the_command_then_repair_restores_the_fix(committed: Path, capsys) -> None:
    capsys.readouterr()
    before = snapshot(committed)
    code, _, err = run_main(capsys, "apply", "tree")
    assert code == 2 and snapshot(committed) == before
    line = one_error_line(err)
    assert "but not all of its fix" in line
    assert line.endswith(
        "the fix was partly removed, or written by an older pdguard: "
        "`pdguard apply --repair tree` restores it"
    )
    code, out, err = run_main(capsys, "apply", "--repair", "tree")
    assert code == 0, err
    assert f"tree/{PREFILL_REL}: restored from the last commit, inflight-deadline" in err
    assert "inflight-deadline         applied" in out
    repaired = (committed / PREFILL_REL).read_text()
    assert repaired.count(CALL) == 1
    assert run_main(capsys, "check", "tree")[0] == 0
    # the same text as a fresh apply of the committed release
    git(committed, "stash", "-q")
    assert run_main(capsys, "apply", "tree")[0] == 0
    assert (committed / PREFILL_REL).read_text() == repaired


def test_repair_takes_an_older_pdguards_own_lines(committed: Path, capsys) -> None:
    """A line an older pdguard wrote differently, inside the block its marker heads, is
    pdguard's: --repair rewrites it as today's apply does."""
    prefill = committed / PREFILL_REL
    text = prefill.read_text()
    helper = text.index(f"def {INFLIGHT_HELPER}(")
    docstring = text.index('"""', helper)
    older = text[: docstring + 3] + "(older words) " + text[docstring + 3 :]
    prefill.write_text(older)
    capsys.readouterr()
    code, _, err = run_main(capsys, "apply", "--repair", "tree")
    assert code == 0, err
    assert "(older words)" not in prefill.read_text()
    repaired = prefill.read_text()
    git(committed, "stash", "-q")
    assert run_main(capsys, "apply", "tree")[0] == 0
    assert prefill.read_text() == repaired


def test_repair_never_loses_a_change_of_the_users(committed: Path, capsys) -> None:
    prefill = committed / PREFILL_REL
    prefill.write_text(prefill.read_text() + "\nLOCAL_TUNING = 3  # the user's own line\n")
    capsys.readouterr()
    before = snapshot(committed)
    code, _, err = run_main(capsys, "apply", "--repair", "tree")
    assert code == 2 and snapshot(committed) == before
    line = one_error_line(err)
    assert "would lose a change that is not pdguard's" in line and "LOCAL_TUNING" in line


def test_repair_without_a_pristine_copy_says_what_to_do(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tree = make_tree(tmp_path / "tree")  # no git, a version no wheel has
    assert run_main(capsys, "apply", "tree")[0] == 0
    remove_the_call(tree / PREFILL_REL)
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", "--repair", "tree")
    assert code == 2 and snapshot(tree) == before
    assert "no pristine copy" in one_error_line(err)


@pytest.mark.releases
def test_repair_an_installed_release_from_its_wheel(tmp_path: Path, capsys) -> None:
    tree = copy_release("0.5.14", tmp_path / "site-packages")
    assert run_main(capsys, "apply", str(tree))[0] == 0
    fixed = (tree / PREFILL_REL).read_text()
    remove_the_call(tree / PREFILL_REL)
    code, _, err = run_main(capsys, "apply", "--repair", str(tree))
    assert code == 0, err
    assert "restored from the sglang 0.5.14 wheel" in err
    assert (tree / PREFILL_REL).read_text() == fixed
