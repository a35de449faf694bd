"""``--installed`` on every command that takes a target (docs/cli.md): the sglang this Python
would import, found without importing it. ``check``, ``apply``, ``simulate``, ``verify`` and
``demo`` read it where it is; ``carry`` and ``export`` need its git checkout (an editable
install), and of an installed wheel say, in one error line, why not and what to run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdguard.cli import build_parser
from pdguard.commands import COMMANDS
from tests.commands.test_export import _checkout
from tests.helpers import git, init_repo, one_error_line, run_main, snapshot

# Commands that take no SGLang tree at all.
NO_TARGET = {"rule"}


@pytest.fixture
def installed(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The snippets tree as an installed wheel would leave it: ``sglang`` on ``sys.path``, no
    git checkout around it; run from elsewhere."""
    monkeypatch.syspath_prepend(str(tree))
    (tree.parent / "elsewhere").mkdir()
    monkeypatch.chdir(tree.parent / "elsewhere")
    return tree


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one error line of a command line argparse rejects (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        run_main(capsys, *args)
    assert exited.value.code == 2
    return one_error_line(capsys.readouterr().err)


def test_every_command_with_a_target_has_installed() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for command in COMMANDS:
        options = {
            option
            for action in subparsers.choices[command.NAME]._actions  # type: ignore[attr-defined]
            for option in action.option_strings
        }
        assert ("--installed" in options) is (command.NAME not in NO_TARGET), command.NAME


def test_verify_installed_reads_it_as_it_is(installed: Path, capsys) -> None:
    code, out, err = run_main(capsys, "verify", "--installed", "--format", "json")
    assert code == 1, err  # the fixes are applicable: not yet carried
    (report,) = json.loads(out)
    assert report["ref"] == str(installed / "sglang")
    assert report["fixes"]["inflight-deadline"] == "applicable"
    assert report["findings"] and report["wheel"] is None
    code, _, err = run_main(capsys, "verify", "--installed", "--ref", "main")
    assert code == 2 and "--ref/--tags go with --repo, not --installed" in one_error_line(err)
    assert "not allowed with" in usage_error(capsys, "verify", "--installed", "--pypi", "0.5.14")


def test_demo_installed_patches_a_copy(installed: Path, capsys) -> None:
    before = snapshot(installed)
    code, out, err = run_main(capsys, "demo", "--installed", "--format", "json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["demo"]["source"] == f"installed: {installed}"
    assert payload["fixes"]["inflight-deadline"] == "applied" and payload["diff"]
    assert snapshot(installed) == before  # the installed package is not touched
    assert "not allowed with" in usage_error(capsys, "demo", "--installed", "--release", "0.5.14")


def test_simulate_check_apply_installed(installed: Path, capsys) -> None:
    assert run_main(capsys, "simulate", "--installed", "--list")[0] == 0
    assert run_main(capsys, "check", "--installed")[0] == 1
    assert run_main(capsys, "apply", "--installed", "--check")[0] == 1


@pytest.mark.parametrize(
    ("command", "instead"),
    [
        (["carry", "--onto", "HEAD", "--branch", "b"], "`pdguard apply --installed`"),
        (["export", "-o", "out"], "`pdguard apply --installed --diff`"),
    ],
)
def test_git_commands_refuse_an_installed_wheel(installed: Path, capsys, command, instead):
    code, _, err = run_main(capsys, *command, "--installed")
    line = one_error_line(err)
    assert code == 2
    assert f"{installed / 'sglang'} is not in a git checkout (an installed wheel)" in line
    assert instead in line
    assert not Path("out").exists()


@pytest.mark.releases
def test_git_commands_use_the_checkout_of_an_editable_install(tmp_path: Path, capsys, monkeypatch):
    checkout = _checkout("0.5.14", tmp_path / "sglang")
    monkeypatch.syspath_prepend(str(checkout / "python"))  # pip install -e python
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "export", "--installed", "-o", "series")
    assert code == 0, err
    assert sorted(p.name[:5] for p in (tmp_path / "series").glob("*.patch"))[:1] == ["0001-"], out
    code, _, err = run_main(capsys, "carry", "--installed", "--onto", "HEAD", "--branch", "fixed")
    assert code == 0, err
    assert git(checkout, "rev-parse", "--verify", "-q", "fixed")
    assert git(checkout, "status", "--porcelain") == ""
    code, _, err = run_main(capsys, "export", str(checkout), "--installed", "-o", "x")
    assert code == 2 and "not both" in one_error_line(err)


def test_export_defaults_to_the_checkout_it_is_in(tmp_path: Path, capsys, monkeypatch) -> None:
    init_repo(tmp_path / "repo")
    (tmp_path / "repo" / "python" / "sglang" / "srt").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "python" / "sglang" / "srt")
    code, _, err = run_main(capsys, "export", "-o", str(tmp_path / "out"))
    assert code == 2 and "not an SGLang tree" in one_error_line(err)
