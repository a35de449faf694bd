"""What every command shares (help, formats), and the small commands: ``rule``,
``simulate --list``, ``demo``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.cli import build_parser, main
from pdguard.commands import COMMANDS
from pdguard.fixes import FIXES
from pdguard.simulate import DECODE_SCENARIOS, SCENARIOS

FORMAT_NAMES = {"text", "json", "sarif", "github"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("command", [c.NAME for c in COMMANDS])
def test_help_describes_every_option_and_the_exit_codes(command: str, capsys) -> None:
    sub = _subparsers()[command]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (command, action.dest)
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out, command
    assert "0 " in out.split("exit codes:")[1] and "2 " in out.split("exit codes:")[1]


@pytest.mark.parametrize("command", [c.NAME for c in COMMANDS])
def test_format_names_mean_the_same_everywhere(command: str) -> None:
    module = next(c for c in COMMANDS if command == c.NAME)
    assert set(module.FORMATS) <= FORMAT_NAMES
    [fmt] = [a for a in _subparsers()[command]._actions if a.dest == "format"] or [None]
    if fmt is not None:
        assert list(fmt.choices) == list(module.FORMATS)


# --- rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", checks.RULES, ids=lambda r: r.code)
def test_rule_prints_its_documentation(rule, capsys) -> None:
    assert main(["rule", rule.code.lower()]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {rule.name} ({rule.code})\n")
    for heading in ("What it does", "Why is this bad", "Example", "How pdguard fixes it"):
        assert heading in out
    for fix in FIXES:
        assert (f"`{fix.name}` fix" in out) == (rule.code in fix.fixes)


def test_rule_all_and_json(capsys) -> None:
    assert main(["rule", "--all"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("# ")] == [
        f"# {r.name} ({r.code})" for r in checks.RULES
    ]
    assert main(["rule", "--all", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == list(checks.CODES)
    pdg001 = next(d for d in data if d["code"] == "PDG001")
    assert [f["name"] for f in pdg001["fixes"]] == [f.name for f in FIXES if "PDG001" in f.rules]


@pytest.mark.parametrize("args", [["PDG9"], ["PDG0011"], []])
def test_rule_errors(args: list[str], capsys) -> None:
    try:
        code = main(["rule", *args])
    except SystemExit as exc:  # argparse: neither CODE nor --all
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error:" in err


# --- simulate --list -------------------------------------------------------------------------


def test_simulate_list(capsys) -> None:
    assert main(["simulate", "--list"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert names == [s.name for s in (*SCENARIOS, *DECODE_SCENARIOS)]
    assert main(["simulate", "--list", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == [
        {"name": s.name, "expected": s.expected} for s in (*SCENARIOS, *DECODE_SCENARIOS)
    ]


def test_simulate_defaults_to_the_tree_here(capsys, tmp_path, monkeypatch) -> None:
    """Like check and apply: TARGET defaults to ., or the tree . lies in."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate"]) == 2
    assert ".: not an SGLang tree" in capsys.readouterr().err


# --- demo ------------------------------------------------------------------------------------


@pytest.mark.releases
def test_demo_json_is_only_json(tmp_path: Path) -> None:
    from pdguard.vendor_sglang import is_cached

    cached = is_cached("0.5.14")
    done = subprocess.run(
        [sys.executable, "-m", "pdguard", "demo", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)  # nothing but the JSON on stdout
    assert payload["written"] is True
    fixes = payload["fixes"]
    assert fixes["inflight-deadline"] == fixes["sender-bootstrap-timeout"] == "applied"  # patched
    assert set(fixes.values()) <= {"applied", "upstream"}  # 0.5.14's receivers have it upstream
    assert payload["diff"].startswith("--- a/sglang-0.5.14/sglang/srt/disaggregation/")
    assert payload["demo"]["kept"] is False
    assert not Path(payload["demo"]["copy"]).exists()  # said: removed
    assert "removed" in payload["demo"]["summary"]
    # progress on stderr; "fetching" only when it does
    said = "sglang 0.5.14 from the cache" if cached else "fetching sglang 0.5.14"
    assert said in done.stderr and ("fetching" in done.stderr) is not cached


@pytest.mark.releases
def test_demo_keep(tmp_path: Path, capsys) -> None:
    keep = tmp_path / "kept"
    assert main(["demo", "--keep", str(keep)]) == 0
    out, err = capsys.readouterr()
    copy = keep / "sglang-0.5.14"
    assert out.splitlines()[-1] == f"pdguard demo: patched the copy kept at {copy}"
    assert (
        "pdguard: inflight-deadline" in (copy / "sglang/srt/disaggregation/prefill.py").read_text()
    )
    assert "from the cache" in err or "fetching" in err
    assert main(["demo", "--keep", str(keep)]) == 2  # never over an earlier copy
    assert "exists" in capsys.readouterr().err


# --- a closed stdout and Ctrl-C, for the commands that print much ----------------------------


@pytest.mark.parametrize(
    "argv", [["rule", "--all"], ["simulate", "--list"], ["check", "--help"], ["rule", "PDG001"]]
)
def test_closed_stdout_exits_141_quietly(argv: list[str]) -> None:
    """`pdguard rule --all | head -1`: the reader goes away; no traceback, exit 141."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pdguard", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read()
    assert process.wait(timeout=120) in (0, 141)  # 0: --help printed before the close
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
