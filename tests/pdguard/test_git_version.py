"""An SGLang git checkout (or a commit ``verify --repo`` reads) that holds no version file (from
0.5.9 setuptools-scm writes ``_version.py`` only into a build) is named from its tags, as
setuptools-scm names it; before, its version showed as ``-``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdguard.cli import main
from pdguard.git_version import tag_version
from tests.helpers import git, init_repo
from tests.snippets import VERSION_REL, make_tree


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with the tree under python/ and no version file, one commit, untagged."""
    monkeypatch.chdir(tmp_path)
    repo = init_repo(tmp_path / "sglang")
    make_tree(repo / "python")
    (repo / "python" / VERSION_REL).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def _verify_version(capsys, repo: Path, ref: str) -> str:
    main(["verify", "--repo", str(repo), "--ref", ref, "--format", "json", "--no-cache"])
    [report] = json.loads(capsys.readouterr().out)
    assert report["error"] is None, report["error"]
    return str(report["sglang_version"])


def test_versions_from_tags(checkout: Path, capsys) -> None:
    sha = git(checkout, "rev-parse", "--short=8", "HEAD")
    # no tag: setuptools-scm's own fallback, never "-"
    assert tag_version(checkout) == f"0.1.dev1+g{sha}"
    git(checkout, "tag", "-a", "-m", "release", "v0.5.9")
    assert _verify_version(capsys, checkout, "v0.5.9") == "0.5.9"
    (checkout / "README.md").write_text("after the release\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "second")
    assert re.fullmatch(r"0\.5\.10\.dev1\+g[0-9a-f]{7,}", _verify_version(capsys, checkout, "main"))
    assert _verify_version(capsys, checkout, "v0.5.9") == "0.5.9"  # the tag, not HEAD
    # a checkout on disk: apply's report names it too
    git(checkout, "checkout", "-q", "v0.5.9")
    code, out = main(["apply", str(checkout), "--check"]), capsys.readouterr().out
    assert code == 1 and "(sglang 0.5.9)" in out.splitlines()[0]


def test_a_version_file_wins_and_a_vendored_copy_gets_none(checkout: Path, tmp_path) -> None:
    from pdguard.tree import open_tree

    git(checkout, "tag", "v0.5.9")
    assert open_tree(checkout).sglang_version() == "0.5.9"
    (checkout / "python" / VERSION_REL).write_text('__version__ = "0.5.9.post1"\n')
    assert open_tree(checkout).sglang_version() == "0.5.9.post1"
    vendored = make_tree(checkout / "third_party" / "sglang")  # another repository's tags
    (vendored / VERSION_REL).unlink()
    assert open_tree(vendored).sglang_version() is None
