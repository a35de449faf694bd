"""The habits of ruff that pdguard's command line keeps (docs/cli.md): ``check --fix``, the
fixable line, ``--statistics``, ``-q``, ``--output-format``, ``--config``/``--isolated`` and
``[tool.pdguard]``, a target found upward, ``--installed`` everywhere, colour and wrapping,
syntax errors as diagnostics, and paths that ``git apply``/``patch -p1`` accept."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from pdguard import terminal
from tests.helpers import one_error_line, run_main, snapshot
from tests.paths import SARIF_SCHEMA
from tests.snippets import PREFILL_REL

SCHEMA_PATH = SARIF_SCHEMA
FIXABLE = "[*] 1 fixable with `pdguard apply` (or `pdguard check --fix`)."
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)


def break_prefill(tree: Path) -> int:
    """Make prefill.py fail to parse; the line it fails on."""
    prefill = tree / PREFILL_REL
    text = prefill.read_text()
    prefill.write_text(text + "\ndef broken(:\n")
    return len(text.splitlines()) + 2


# --- check --fix, the fixable line, --statistics, -q, --output-format ---------------------


def test_fixable_line_then_check_fix_writes_the_fixes(tree: Path, capsys) -> None:
    code, out, _ = run_main(capsys, "check", "tree")
    assert code == 1 and out.splitlines()[-2:] == ["Found 1 finding.", FIXABLE]
    code, out, err = run_main(capsys, "check", "tree", "--fix")
    assert code == 0, err
    assert out == "All checks passed! (1 fixed)\n"
    assert err == f"pdguard: fixed (inflight-deadline): tree/{PREFILL_REL}\n"
    assert run_main(capsys, "check", "tree")[:2] == (0, "All checks passed!\n")
    assert run_main(capsys, "check", "tree", "--fix")[:2] == (0, "All checks passed!\n")


def test_check_fix_quiet_prints_nothing_on_success(tree: Path, capsys) -> None:
    assert run_main(capsys, "check", "tree", "--fix", "-q") == (0, "", "")


def test_statistics(tree: Path, capsys) -> None:
    code, out, _ = run_main(capsys, "check", "tree", "--statistics")
    assert code == 1
    assert out.splitlines() == [
        "    1  PDG001  [*] inflight-wait-forever",
        "Found 1 finding.",
        FIXABLE,
    ]
    code, out, _ = run_main(capsys, "check", "tree", "--statistics", "--output-format", "json")
    assert json.loads(out) == [
        {"code": "PDG001", "name": "inflight-wait-forever", "count": 1, "fixable": True}
    ]
    code, _, err = run_main(capsys, "check", "tree", "--statistics", "--format", "sarif")
    assert code == 2 and "--statistics" in one_error_line(err)


def test_quiet_prints_the_findings_only(tree: Path, capsys) -> None:
    code, out, err = run_main(capsys, "check", "tree", "-q")
    assert (code, err) == (1, "")
    (line,) = out.splitlines()
    assert line.startswith(f"tree/{PREFILL_REL}:") and " PDG001 " in line


def test_output_format_is_format(tree: Path, capsys) -> None:
    one = run_main(capsys, "check", "tree", "--output-format", "json")
    assert one == run_main(capsys, "check", "tree", "--format", "json")
    assert json.loads(one[1])["findings"][0]["code"] == "PDG001"


# --- settings: [tool.pdguard], --config, --isolated ---------------------------------------


def test_pyproject_select_and_ignore_are_read(tree: Path, capsys) -> None:
    (tree / "pyproject.toml").write_text('[tool.pdguard]\nignore = ["PDG001"]\n')
    assert run_main(capsys, "check", "tree")[:2] == (0, "All checks passed!\n")
    assert run_main(capsys, "check", "tree", "--isolated")[0] == 1
    # --select replaces the file's select; --ignore adds to its ignore
    (tree / "pyproject.toml").write_text('[tool.pdguard]\nselect = ["PDG004"]\n')
    assert run_main(capsys, "check", "tree")[0] == 0
    assert run_main(capsys, "check", "tree", "--select", "PDG001")[0] == 1


def test_the_current_directory_settings_count_too(tree: Path, capsys) -> None:
    Path("pyproject.toml").write_text('[tool.pdguard]\nignore = ["PDG001"]\n')  # tmp_path
    assert run_main(capsys, "check", "tree")[0] == 0


def test_config_names_a_file(tree: Path, capsys) -> None:
    Path("pdguard.toml").write_text('ignore = ["PDG001"]\n')  # top-level keys
    assert run_main(capsys, "check", "tree", "--config", "pdguard.toml")[0] == 0
    code, _, err = run_main(capsys, "check", "tree", "--config", "nope.toml")
    assert code == 2 and "nope.toml: no such file" in one_error_line(err)
    with pytest.raises(SystemExit) as exited:
        run_main(capsys, "check", "tree", "--config", "x", "--isolated")
    assert exited.value.code == 2
    assert "not allowed with" in one_error_line(capsys.readouterr().err)


def test_a_fix_disabled_in_pyproject_is_left_out(tree: Path, capsys) -> None:
    (tree / "pyproject.toml").write_text("[tool.pdguard.fix.inflight-deadline]\nenabled = false\n")
    code, out, _ = run_main(capsys, "apply", "tree", "--check")
    assert code == 0 and re.search(r"inflight-deadline\s+skipped", out), out
    # check --fix leaves it out too, and its finding is no longer "fixable"
    code, out, _ = run_main(capsys, "check", "tree", "--fix")
    assert code == 1 and out.splitlines()[-1] == "Found 1 finding."
    # --select names it back
    code, out, _ = run_main(capsys, "apply", "tree", "--select", "inflight-deadline")
    assert code == 0 and re.search(r"inflight-deadline\s+applied", out), out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('[tool.pdguard]\nselct = ["PDG001"]\n', "unknown key 'selct'"),
        ("[tool.pdguard]\nselect = 1\n", "select: expected a list of strings"),
        ("[tool.pdguard.fix.nope]\nenabled = false\n", "[tool.pdguard.fix.nope]: unknown fix"),
        ("[tool.pdguard.fix.inflight-deadline]\non = false\n", "unknown key 'on'"),
        ("[tool.pdguard.fix.inflight-deadline]\nenabled = 0\n", "expected true/false"),
        ("[tool.pdguard\n", "cannot read its pdguard settings"),
    ],
)
@pytest.mark.parametrize("command", ["check", "apply"])
def test_bad_settings_are_one_error_line(
    tree: Path, capsys, content: str, says: str, command: str
) -> None:
    (tree / "pyproject.toml").write_text(content)
    before = snapshot(tree)
    code, out, err = run_main(capsys, command, "tree")
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert f"{tree / 'pyproject.toml'}: " in line and says in line, line
    assert snapshot(tree) == before


# --- where the tree is: ., a subdirectory, --installed ------------------------------------


def test_apply_defaults_to_the_current_directory(tree: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tree)
    code, out, _ = run_main(capsys, "apply", "--check")
    assert code == 1 and "would change" in out


@pytest.mark.parametrize("command", [["check"], ["apply", "--check"], ["simulate", "--list"]])
def test_a_subdirectory_finds_its_tree(tree: Path, capsys, monkeypatch, command) -> None:
    monkeypatch.chdir(tree / "sglang" / "srt" / "disaggregation")
    code, out, err = run_main(capsys, *command)
    assert code in (0, 1), err
    assert "not an SGLang tree" not in err
    if command == ["check"]:
        assert out.startswith("prefill.py:") and " PDG001 " in out


def test_installed_on_every_command_that_takes_a_tree(tree: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(tree))  # `sglang` importable from there
    monkeypatch.chdir(tree.parent / "tree" / "sglang")
    assert run_main(capsys, "check", "--installed")[0] == 1
    assert run_main(capsys, "apply", "--installed", "--check")[0] == 1
    code, _, err = run_main(capsys, "apply", "--installed", "tree")
    assert code == 2 and "not both" in one_error_line(err)
    code, _, err = run_main(capsys, "check", "--installed", "tree")
    assert code == 2 and "not both" in one_error_line(err)


# --- colour, wrapping ---------------------------------------------------------------------


def test_colour_on_force_color_never_with_no_color(tree: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    _, out, _ = run_main(capsys, "check", "tree")
    assert "\x1b[1;31mPDG001\x1b[0m" in out
    assert ANSI.sub("", out) == run_main(capsys, "check", "tree", "--output-file", "x.txt")[1] + (
        Path("x.txt").read_text()
    )
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run_main(capsys, "check", "tree")[1]
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.delenv("NO_COLOR")
    assert "\x1b[" not in run_main(capsys, "check", "tree")[1]  # not a terminal


def test_text_wraps_on_a_terminal(tree: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(terminal, "is_tty", lambda stream: True)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "72")
    _, out, _ = run_main(capsys, "check", "tree")
    lines = out.splitlines()
    assert len(lines) > 3 and all(len(line) <= 72 for line in lines), lines
    assert lines[0].startswith(f"tree/{PREFILL_REL}:") and lines[1].startswith("    ")
    monkeypatch.setattr(terminal, "is_tty", lambda stream: False)
    assert max(len(line) for line in run_main(capsys, "check", "tree")[1].splitlines()) > 72


# --- syntax errors are diagnostics in every format ----------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_a_file_that_does_not_parse_is_a_diagnostic(tree: Path, capsys, fmt: str) -> None:
    line = break_prefill(tree)
    code, _, err = run_main(capsys, "check", "tree", "--format", fmt, "--output-file", "out")
    assert code == 2
    assert one_error_line(err).startswith(f"pdguard: error: tree/{PREFILL_REL}:{line}:")
    report = Path("out").read_text()
    assert "E999" in report and "does not parse" in report
    assert "All checks passed" not in report
    if fmt == "sarif":
        log = json.loads(report)
        validator = jsonschema.Draft4Validator(json.loads(SCHEMA_PATH.read_text()))
        validator.validate(log)
        (result,) = log["runs"][0]["results"]
        assert result["ruleId"] == "E999"
        rules = log["runs"][0]["tool"]["driver"]["rules"]
        assert rules[result["ruleIndex"]]["id"] == "E999"
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == f"tree/{PREFILL_REL}"
        assert location["region"]["startLine"] == line


# --- paths: never ../; diffs that git apply and patch -p1 take ----------------------------


def test_github_annotations_outside_the_current_directory(tree: Path, capsys, monkeypatch):
    (tree.parent / "elsewhere").mkdir()
    monkeypatch.chdir(tree.parent / "elsewhere")
    _, out, _ = run_main(capsys, "check", "../tree", "--format", "github")
    assert out.startswith(f"::error file={PREFILL_REL},"), out
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tree.parent))
    _, out, _ = run_main(capsys, "check", "../tree", "--format", "github")
    assert out.startswith(f"::error file=tree/{PREFILL_REL},"), out
    _, out, _ = run_main(capsys, "check", "../tree")
    assert out.startswith(f"{(tree / PREFILL_REL).resolve()}:"), out  # absolute, not ../


@pytest.mark.skipif(not shutil.which("patch"), reason="needs patch(1)")
@pytest.mark.parametrize("where", ["inside", "elsewhere"])
def test_the_diff_applies_with_git_apply_and_patch(tree: Path, capsys, monkeypatch, where):
    cwd = tree.parent if where == "inside" else tree.parent / "elsewhere"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    code, diff, err = run_main(
        capsys, "apply", "../tree" if where != "inside" else "tree", "--diff"
    )
    assert code == 1 and "../" not in diff
    # the report says where the paths start when it is not here
    root = cwd if where == "inside" else tree.resolve()
    assert (f"relative to {root}" in err) is (where != "inside")
    for command in (["git", "apply", "--check", "-"], ["patch", "-p1", "--dry-run"]):
        done = subprocess.run(command, cwd=root, input=diff, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    subprocess.run(["git", "apply", "-"], cwd=root, input=diff, check=True, text=True)
    assert run_main(capsys, "check", str(tree))[0] == 0  # the applied diff is the fix


def _hinted(err: str) -> Path:
    """The directory apply's stderr says the diff's paths start from."""
    found = re.search(r"relative to (.+?): apply it there", err)
    assert found, err
    return Path(found[1])


@pytest.mark.skipif(not shutil.which("patch"), reason="needs patch(1)")
@pytest.mark.parametrize("tool", ["git", "patch"])
def test_installed_diff_from_elsewhere_applies_with_the_commands_it_prints(
    tree: Path, capsys, monkeypatch, tool: str
) -> None:
    """``apply --installed --diff`` run from an unrelated directory (the installed package in
    a git checkout's ignored virtualenv, as a developer has it): the diff, saved to a file
    there, applies with exactly the command stderr prints, relative DIFF and all."""
    checkout = tree.parent / "checkout"
    site = checkout / ".venv" / "site"
    site.mkdir(parents=True)
    shutil.copytree(tree / "sglang", site / "sglang")
    (checkout / ".gitignore").write_text(".venv/\n")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    monkeypatch.syspath_prepend(str(site))  # `sglang` importable from there
    elsewhere = tree.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, diff, err = run_main(capsys, "apply", "--installed", "--diff")
    assert code == 1 and diff.startswith("--- a/") and "../" not in diff
    root = _hinted(err)
    assert root == (site / "sglang").resolve()
    Path("fix.diff").write_text(diff)
    command = (
        f"git -C {root} apply < fix.diff" if tool == "git" else f"patch -p1 -d {root} < fix.diff"
    )
    assert command in err.replace("DIFF", "fix.diff")
    subprocess.run(command, shell=True, check=True, capture_output=True)
    assert run_main(capsys, "check", "--installed")[0] == 0  # the applied diff is the fix


def test_annotations_and_sarif_in_a_workflow_name_files_from_the_workspace(
    tree: Path, capsys, monkeypatch
) -> None:
    """A workflow step whose ``working-directory`` is below the checkout: GitHub resolves
    annotation and SARIF paths from the workspace (the repository's root), so that is where
    pdguard names them from, not from the step's directory."""
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tree.parent))
    monkeypatch.chdir(tree)
    _, out, _ = run_main(capsys, "check", ".", "--format", "github")
    assert out.startswith(f"::error file=tree/{PREFILL_REL},"), out
    run_main(capsys, "check", ".", "--format", "sarif", "--output-file", "out.sarif")
    run_ = json.loads(Path("out.sarif").read_text())["runs"][0]
    assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tree.parent.resolve().as_uri() + "/"
    (result,) = run_["results"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": f"tree/{PREFILL_REL}", "uriBaseId": "%SRCROOT%"}
    # and from outside the tree (a sibling directory of the workspace)
    (tree.parent / "elsewhere").mkdir()
    monkeypatch.chdir(tree.parent / "elsewhere")
    run_main(capsys, "check", "../tree", "--format", "sarif", "--output-file", "out.sarif")
    result = json.loads(Path("out.sarif").read_text())["runs"][0]["results"][0]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": f"tree/{PREFILL_REL}", "uriBaseId": "%SRCROOT%"}


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_apply_on_a_file_that_does_not_parse_reports_it(
    tree: Path, capsys, monkeypatch, fmt: str
) -> None:
    """apply's report is the E999 diagnostic (it was empty), in each of its formats, and from
    outside the tree it names the file absolutely (never ``../``); nothing is written."""
    line = break_prefill(tree)
    before = (tree / PREFILL_REL).read_text()
    code, _, err = run_main(capsys, "apply", "tree", "--format", fmt, "--output-file", "out")
    assert code == 2
    assert one_error_line(err).startswith(f"pdguard: error: tree/{PREFILL_REL}:{line}:")
    report = Path("out").read_text()
    why = one_error_line(err).split(f":{line}:12: ", 1)[1]
    if fmt == "json":
        (error,) = json.loads(report)["errors"]
        assert (error["code"], error["path"], error["line"]) == (
            "E999",
            f"tree/{PREFILL_REL}",
            line,
        )
    else:
        assert report.startswith(f"tree/{PREFILL_REL}:{line}:") and " E999 does not parse" in report
    (tree.parent / "elsewhere").mkdir()
    monkeypatch.chdir(tree.parent / "elsewhere")
    code, out, err = run_main(capsys, "apply", "../tree", "--format", fmt, "--diff")
    assert code == 2 and "../tree/" not in out + err  # files absolute (the target as typed)
    assert one_error_line(err).endswith(f"{(tree / PREFILL_REL).resolve()}:{line}:12: {why}")
    if fmt == "json":  # the report on stdout, the diff's place
        assert json.loads(out)["errors"][0]["path"] == str((tree / PREFILL_REL).resolve())
    assert (tree / PREFILL_REL).read_text() == before
