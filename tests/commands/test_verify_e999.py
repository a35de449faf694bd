"""``verify`` on a ref one of whose files does not parse (or cannot be decoded): the ref is an
error row (exit 2, one ``pdguard: error:`` line naming the ref), and its report holds the
file's ``E999`` diagnostic exactly as ``check`` gives it on a checkout of that commit, in each
format verify has: the path relative to the repository root, with line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import git, init_repo, run_main
from tests.snippets import PREFILL_REL, make_tree

PREFILL = f"python/{PREFILL_REL}"
BREAKS = {
    "syntax": lambda text: text + b"def broken(:\n",
    "encoding": lambda text: b"# -*- coding: no-such-codec -*-\n" + text,
}


@pytest.fixture(params=list(BREAKS))
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """``good`` (make_tree), then ``bad``: its prefill.py broken."""
    repo = init_repo(tmp_path / "repo")
    make_tree(repo / "python")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "good")
    git(repo, "tag", "good")
    prefill = repo / PREFILL
    prefill.write_bytes(BREAKS[request.param](prefill.read_bytes()))
    git(repo, "commit", "-q", "-am", "bad")
    git(repo, "tag", "bad")
    return repo


def _check(capsys: pytest.CaptureFixture[str], repo: Path, fmt: str) -> tuple[str, str]:
    """``check`` of the checkout (at ``bad``), from the repository root: (stdout, error line)."""
    code, out, err = run_main(capsys, "check", "python", "--format", fmt, "--no-cache")
    assert code == 2, err
    return out.strip(), err.strip()


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_verify_reports_check_s_e999(
    repo: Path, fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    checked, error = _check(capsys, repo, fmt)
    monkeypatch.chdir(repo.parent)  # verify names files from the repository root wherever run
    args = ["verify", "--repo", "repo", "--ref", "good", "--ref", "bad", "--jobs", "1"]
    code, out, err = run_main(capsys, *args, "--format", fmt, "--no-cache")
    assert code == 2
    assert err.strip() == error.replace("pdguard: error: ", "pdguard: error: bad: ", 1)
    assert error.startswith(f"pdguard: error: {PREFILL}:")
    if fmt == "json":
        reports = {r["ref"]: r for r in json.loads(out)}
        [finding] = json.loads(checked)["findings"]
        del finding["fixable"]
        assert finding["code"] == "E999"
        assert reports["bad"]["findings"] == [finding]
        assert reports["bad"]["error"] == err.strip().removeprefix("pdguard: error: ")
        assert reports["good"]["error"] is None
    elif fmt == "text":
        line = checked.splitlines()[0]
        assert line.startswith(f"{PREFILL}:") and " E999 " in line
        assert f"bad: {line}" in out.splitlines()
        assert not any(row.startswith("bad: error:") for row in out.splitlines())
    else:
        assert checked.startswith(f"::error file={PREFILL},line=")
        assert checked in out.splitlines()
        assert "title=pdguard verify bad" not in out
