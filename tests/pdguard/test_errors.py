"""The one error model (pdguard/errors.py): every error exits 2 with one line, a bug too (with
where to report it, the traceback only with --debug), Ctrl-C 130, a closed stdout 141; and the
format names every command shares."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard import cli, errors
from pdguard.cli import main
from pdguard.commands import COMMANDS, apply, check, simulate, verify
from pdguard.source_file import SourceFile
from tests.helpers import snapshot
from tests.snippets import PREFILL_REL, make_tree

SHARED_FORMATS = {"text", "json", "sarif", "github"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "tree")


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pdguard: error: "), err
    return lines[0]


def _bug(*_: object, **__: object) -> None:
    raise RuntimeError("boom\nsecond line")


# --- a bug in pdguard ----------------------------------------------------------------------


def test_a_bug_exits_2_with_one_line_and_where_to_report_it(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PDGUARD_DEBUG", raising=False)
    monkeypatch.setattr(apply, "plan", _bug)
    before = snapshot(tree)
    assert main(["apply", str(tree)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "bug in pdguard" in line and errors.ISSUES_URL in line
    assert "RuntimeError: boom" in line and "Traceback" not in line
    assert snapshot(tree) == before


@pytest.mark.parametrize(
    "argv, env",
    [
        (["--debug", "apply", "{tree}"], None),
        (["apply", "--debug", "{tree}"], None),
        (["apply", "{tree}"], "1"),
    ],
)
def test_debug_prints_the_traceback(
    tree: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: str | None,
) -> None:
    if env is None:
        monkeypatch.delenv("PDGUARD_DEBUG", raising=False)
    else:
        monkeypatch.setenv("PDGUARD_DEBUG", env)
    monkeypatch.setattr(apply, "plan", _bug)
    assert main([a.format(tree=tree) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):"), err
    assert "RuntimeError: boom" in err
    assert err.splitlines()[-1].startswith("pdguard: error: internal error")


def test_a_bug_in_a_subprocess(tree: Path) -> None:
    """The same through the console entry point: `python -m pdguard`."""
    code = (
        "import sys; from pdguard.commands import check; "
        "check.check_tree = lambda *a, **k: 1 / 0; "
        "from pdguard.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PDGUARD_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", code, "check", str(tree)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert "ZeroDivisionError" in line and "bug in pdguard" in line


# --- Ctrl-C and a closed stdout --------------------------------------------------------------


def test_ctrl_c_exits_130_quietly(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "check_tree", interrupted)
    assert main(["check", str(tree)]) == errors.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == ""


_SLOW_VERIFY = """\
import sys, time
from pdguard.commands import verify

def slow(version, run=None):
    sys.stderr.write("started\\n")
    sys.stderr.flush()
    time.sleep(4)

verify._verify_release = slow
from pdguard.cli import main
sys.exit(main(["verify", "--pypi", "1", "2", "--jobs", "2"]))
"""


def test_ctrl_c_during_parallel_verify_is_quiet() -> None:
    """Ctrl-C reaches the whole process group: the workers leave it to pdguard, which exits
    130 without a traceback from anyone."""
    import signal

    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_VERIFY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    assert process.stderr.readline() == b"started\n"  # a worker runs: imports are done
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err


def test_broken_pipe_exits_141_quietly(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(check, "check_tree", broken)
    assert main(["check", str(tree)]) == errors.EXIT_BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


def test_closed_stdout_in_a_subprocess(tree: Path) -> None:
    """`pdguard check TREE | head -0`: the reader is gone before pdguard writes."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pdguard", "check", str(tree)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read()
    assert process.wait(timeout=120) == 141
    assert err == b""


# --- user errors: one line, exit 2, never 1 ------------------------------------------------


def test_every_error_class_is_a_pdguard_error() -> None:
    from pdguard.simulate import LoadError, SimulationGap
    from pdguard.source_file import SourceDecodeError
    from pdguard.vendor_sglang import FetchError, UnknownReleaseError
    from pdguard.writer import WriteError

    for cls in (
        errors.TargetError,
        WriteError,
        LoadError,
        SimulationGap,
        SourceDecodeError,
        FetchError,
        UnknownReleaseError,
        errors.UsageError,
        errors.RefusedError,
        errors.ParseError,
    ):
        assert issubclass(cls, errors.PdguardError), cls
    assert issubclass(WriteError, OSError)


@pytest.mark.parametrize("command", ["apply", "check", "simulate"])
def test_does_not_parse_is_one_message_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    root = make_tree(tmp_path / "tree")
    prefill = root / PREFILL_REL
    prefill.write_text(prefill.read_text() + "\ndef broken(:\n")
    assert main([command, str(root)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{prefill}:" in line and ": does not parse: " in line, line


def test_unknown_release_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--release", "9.9"]) == 2
    assert "9.9 is not pinned" in _one_line(capsys.readouterr().err)


def test_usage_errors_are_one_line(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["check", str(tree), "--select", "PDG9"],
        ["check", str(tree), "--simulate", "--format", "sarif"],
        ["simulate", str(tree), "--ranks", "0"],
        ["simulate", str(tree), "--scenario", "nope"],
        ["verify", "--pypi", "0.5.14", "--ref", "main"],
    ):
        assert main(argv) == 2, argv
        _one_line(capsys.readouterr().err)


def test_refusal_is_one_line_and_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_tree(tmp_path / "tree", failed_branch_raises=True)
    assert main(["apply", str(root)]) == 2
    out, err = capsys.readouterr()
    line = _one_line(err)
    assert f"{root / PREFILL_REL}:" in line and "inflight-deadline refused: " in line
    assert "refused" in out


# --- format names ----------------------------------------------------------------------------


def _format_action(command: str):  # type: ignore[no-untyped-def]  # returns argparse's private Action
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr, index]  # argparse's private subparser list
    return next((a for a in sub._actions if a.dest == "format"), None)


@pytest.mark.parametrize("module", COMMANDS, ids=lambda m: m.NAME)
def test_format_choices_are_the_output_registry(module) -> None:  # type: ignore[no-untyped-def]  # a command module, parametrized
    assert set(module.FORMATS) <= SHARED_FORMATS
    assert "text" in module.FORMATS
    action = _format_action(module.NAME)
    if action is not None:
        assert list(action.choices) == list(module.FORMATS)
        assert action.default == "text"


def test_the_same_names_everywhere() -> None:
    assert list(verify.FORMATS) == ["text", "json", "github"]
    assert list(simulate.FORMATS) == ["text", "json"]
    assert list(check.FORMATS) == ["text", "json", "sarif", "github"]
    assert list(apply.FORMATS) == ["text", "json"]


@pytest.mark.parametrize("command", ["verify", "simulate"])
def test_table_is_a_hidden_alias_of_text(command: str) -> None:
    action = _format_action(command)
    assert action.type("table") == "text"
    assert "table" not in action.metavar
    help_text = cli.build_parser()._subparsers._group_actions[0].choices[command].format_help()  # type: ignore[union-attr, index]  # argparse's private subparser list
    assert "table" not in help_text


def test_simulate_table_alias_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pdguard.tree import PREFILL_PATH
    from tests.snippets import TOY_PREFILL

    root = tmp_path / "toy"
    (root / PREFILL_PATH).parent.mkdir(parents=True)
    (root / PREFILL_PATH).write_text(TOY_PREFILL)
    outputs = []
    for name in ("table", "text"):
        assert main(["simulate", str(root), "--scenario", "healthy-traffic", "--format", name]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert "healthy-traffic" in outputs[1]


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for code in ("130", "141", "--debug", "PDGUARD_DEBUG", errors.ISSUES_URL):
        assert code in out


def test_a_patch_that_does_not_compile_is_never_written(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix whose result parses but does not compile (``return`` outside a function: the
    compiler's error, not the parser's) is a bug in pdguard: refused, nothing to write."""
    from pdguard.tree import open_tree
    from pdguard.workspace import Workspace

    changed = Workspace.changed

    def broken(self: Workspace) -> dict[str, SourceFile]:
        changes = changed(self)
        rel = sorted(changes)[0]
        changes[rel] = changes[rel].with_text(changes[rel].text + "\nreturn 1\n")
        return changes

    monkeypatch.setattr(Workspace, "changed", broken)
    result = apply.plan(open_tree(tree))
    assert result.refused and result.changes == {}
    notes = [o.note for o in result.outcomes.values() if o.status.value == "refused"]
    assert any(
        note and note.startswith("internal error: the patched file does not compile")
        for note in notes
    ), notes
