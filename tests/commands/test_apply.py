"""``pdguard apply`` end to end, in-process on the hand-written tree of tests/snippets.py (the
``tree`` fixture of tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard import writer
from pdguard.cli import main
from pdguard.commands import apply
from tests.helpers import one_error_line, run_main, snapshot
from tests.snippets import (
    CONN_REL,
    PREFILL_REL,
    VERSION,
    VERSION_REL,
    make_tree,
    prefill_text,
)

INFLIGHT = "inflight-deadline"
SENDER = "sender-bootstrap-timeout"
# The decode fixes (issue 11): the test tree has no KV receiver and no decode queue.
DECODE_NA = {"receiver-waiting-timeout": "not-applicable", "decode-queue-bound": "not-applicable"}
ABORT_HONOURED = {"sender-abort": "upstream"}  # the snippet's LoopbackKVSender honours abort()
BOM = b"\xef\xbb\xbf"


def statuses(report: str) -> dict[str, str]:
    """The status column of the text report, by fix name."""
    found = {}
    for line in report.splitlines():
        match = re.match(rf"^\s+({INFLIGHT}|{SENDER})\s+(\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def shown(tree: Path, rel: str = PREFILL_REL) -> str:
    """How apply's report and diff name a file of ``tree``: relative to the current directory."""
    return Path(os.path.relpath(tree / rel)).as_posix()


# --- apply, re-apply -----------------------------------------------------------------------


def test_apply_writes_and_reports_applied(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", tree)
    assert (code, err) == (0, "")
    assert statuses(out) == {INFLIGHT: "applied", SENDER: "not-applicable"}
    assert f"1 file(s) changed: {shown(tree)}" in out
    after = snapshot(tree)
    assert after.keys() == before.keys()
    assert after[PREFILL_REL][0] != before[PREFILL_REL][0]
    for rel in (CONN_REL, VERSION_REL):
        assert after[rel] == before[rel]
    patched = (tree / PREFILL_REL).read_text()
    compile(patched, PREFILL_REL, "exec", dont_inherit=True)
    assert "pdguard: inflight-deadline" in patched
    assert "SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT" in patched


def test_second_apply_is_present_and_changes_no_byte(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "apply", tree)[0] == 0
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", tree)
    assert (code, err) == (0, "")
    assert statuses(out) == {INFLIGHT: "present", SENDER: "not-applicable"}
    assert "nothing to change" in out
    assert snapshot(tree) == before  # bytes, mtimes and modes


def test_check_exits_1_before_and_0_after(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", "--check", tree)
    assert (code, err) == (1, "")
    assert statuses(out)[INFLIGHT] == "would-apply"
    assert f"1 file(s) would change: {shown(tree)}" in out
    assert snapshot(tree) == before

    assert run_main(capsys, "apply", tree)[0] == 0
    applied = snapshot(tree)
    code, out, _ = run_main(capsys, "apply", "--check", tree)
    assert code == 0
    assert statuses(out)[INFLIGHT] == "present"
    assert snapshot(tree) == applied


def test_diff_prints_a_unified_diff_and_writes_nothing(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", "--diff", tree)
    assert code == 1  # as ruff: a diff means changes are needed
    assert snapshot(tree) == before
    assert out.startswith(f"--- a/{shown(tree)}\n")  # stdout is the patch alone
    assert f"+++ b/{shown(tree)}\n" in out
    assert re.search(r"^@@ -\d+,\d+ \+\d+,\d+ @@", out, re.M)
    assert CONN_REL not in out
    assert statuses(err)[INFLIGHT] == "would-apply"  # the report is on stderr

    # the diff is the change apply makes: its added lines are in the applied file
    other = make_tree(tmp_path / "other")
    assert run_main(capsys, "apply", other)[0] == 0
    applied = (other / PREFILL_REL).read_text().splitlines()
    added = [
        line[1:] for line in out.splitlines() if line.startswith("+") and not line.startswith("++")
    ]
    assert added
    assert all(line in applied for line in added)


def test_diff_after_apply_prints_no_diff(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_main(capsys, "apply", tree)
    code, out, err = run_main(capsys, "apply", "--diff", tree)
    assert (code, out) == (0, "")
    assert "nothing to change" in err


def test_diff_in_the_json_report(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", "--diff", "--format", "json", tree)
    assert (code, err) == (1, "")
    payload = json.loads(out)
    assert payload["written"] is False
    assert payload["fixes"][INFLIGHT] == "would-apply"
    assert payload["diff"].startswith(f"--- a/{shown(tree)}\n")
    assert snapshot(tree) == before
    run_main(capsys, "apply", tree)
    code, out, _ = run_main(capsys, "apply", "--diff", "--format", "json", tree)
    assert code == 0 and json.loads(out)["diff"] == ""


def test_paths_relative_to_the_current_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(tmp_path / "checkout" / "python")
    monkeypatch.chdir(tmp_path / "checkout")
    code, out, _ = run_main(capsys, "apply", "--check", "--format", "json", ".")
    assert code == 1
    assert json.loads(out)["files_changed"] == [f"python/{PREFILL_REL}"]
    code, out, _ = run_main(capsys, "apply", "--diff", ".")
    assert out.startswith(f"--- a/python/{PREFILL_REL}\n+++ b/python/{PREFILL_REL}\n")


def test_output_file(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "apply.json"
    code, out, err = run_main(capsys, "apply", "--format", "json", "--output-file", report, tree)
    assert (code, out, err) == (0, "", "")
    assert json.loads(report.read_text())["fixes"][INFLIGHT] == "applied"


def test_recovers_an_interrupted_write_before_planning(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = ["pdguard: repaired an interrupted write in somewhere: rolled back"]
    seen: list[Path] = []
    monkeypatch.setattr(writer, "recover", lambda d: seen.append(Path(d)) or notes)
    code, _, err = run_main(capsys, "apply", "--check", tree)  # a dry run repairs nothing
    assert (code, seen, err) == (1, [], "")
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 0
    assert seen == [tree]
    assert err == notes[0] + "\n"


@pytest.mark.parametrize(("flags", "written"), [((), True), (("--check",), False)])
def test_json_report(
    tree: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], written: bool
) -> None:
    code, out, err = run_main(capsys, "apply", *flags, "--format", "json", tree)
    assert code == (0 if written else 1)
    assert err == ""
    payload = json.loads(out)
    assert set(payload) == {
        "target",
        "sglang_version",
        "files_changed",
        "written",
        "fixes",
        "notes",
    }
    assert payload["target"] == "tree"  # as the files are named: from the current directory
    assert payload["sglang_version"] == VERSION
    assert payload["files_changed"] == [shown(tree)]
    assert payload["written"] is written
    status = "applied" if written else "would-apply"  # a dry run never says applied
    assert payload["fixes"] == {
        INFLIGHT: status,
        SENDER: "not-applicable",
        **ABORT_HONOURED,
        **DECODE_NA,
    }
    assert isinstance(payload["notes"], dict)
    assert all(isinstance(v, str) for v in payload["notes"].values())


@pytest.mark.parametrize(
    ("cwd", "typed", "named"),
    [
        ("", "work/../tree", "tree"),  # below the current directory: relative, normalised
        ("work", "../tree", None),  # outside it: absolute (docs/cli.md, "Paths")
    ],
)
def test_target_is_named_as_the_files_are(
    tree: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cwd: str,
    typed: str,
    named: str | None,
) -> None:
    """``target`` (JSON) and the text report's first line name the tree as ``files_changed``
    and the diff name its files (ruff: relative to the current directory when below it, else
    absolute), never the target as typed (``../tree``)."""
    (tree.parent / "work").mkdir()
    monkeypatch.chdir(tree.parent / cwd)
    named = named or tree.resolve().as_posix()
    code, out, _ = run_main(capsys, "apply", "--check", "--format", "json", typed)
    assert code == 1
    payload = json.loads(out)
    assert payload["target"] == named
    assert payload["files_changed"] == [f"{named}/{PREFILL_REL}"]
    code, out, _ = run_main(capsys, "apply", "--check", typed)
    assert out.splitlines()[0] == f"{named} (sglang {VERSION})"
    assert f"would change: {named}/{PREFILL_REL}" in out
    code, out, _ = run_main(capsys, "apply", "--format", "json", "--diff", typed)
    diff = json.loads(out)["diff"]  # from the current directory, else from the tree's root
    assert f"+++ b/{PREFILL_REL if cwd else f'{named}/{PREFILL_REL}'}\n" in diff


def test_json_report_after_apply(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_main(capsys, "apply", tree)
    code, out, _ = run_main(capsys, "apply", "--format", "json", tree)
    assert code == 0
    payload = json.loads(out)
    assert payload["fixes"] == {
        INFLIGHT: "present",
        SENDER: "not-applicable",
        **ABORT_HONOURED,
        **DECODE_NA,
    }
    assert payload["files_changed"] == []


# --- target forms ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["tree root", "sglang package", "checkout root"])
def test_target_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str) -> None:
    if form == "checkout root":
        checkout = tmp_path / "checkout"
        base = make_tree(checkout / "python")
        target = checkout
    else:
        base = make_tree(tmp_path / "tree")
        target = base / "sglang" if form == "sglang package" else base
    original = (base / PREFILL_REL).read_bytes()
    code, out, err = run_main(capsys, "apply", "--format", "json", target)
    assert (code, err) == (0, "")
    payload = json.loads(out)
    assert payload["target"] == str(target)
    assert payload["sglang_version"] == VERSION
    assert payload["fixes"][INFLIGHT] == "applied"
    assert (base / PREFILL_REL).read_bytes() != original
    code, out, _ = run_main(capsys, "apply", "--check", target)
    assert code == 0


# --- errors ----------------------------------------------------------------------------------


def test_nonexistent_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    code, _, err = run_main(capsys, "apply", missing)
    assert code == 2
    assert str(missing) in one_error_line(err)
    assert not missing.exists()


def test_target_is_a_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", tree / PREFILL_REL)
    assert code == 2
    one_error_line(err)
    assert snapshot(tree) == before


def test_not_sglang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "project"
    (other / "pkg").mkdir(parents=True)
    (other / "pkg" / "prefill.py").write_text("x = 1\n")
    before = snapshot(other)
    code, out, err = run_main(capsys, "apply", other)
    assert code == 2
    assert "not an SGLang tree" in one_error_line(err)
    assert out == ""
    assert snapshot(other) == before


def test_disaggregation_without_prefill(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / PREFILL_REL).unlink()
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert "prefill.py" in one_error_line(err)
    assert snapshot(tree) == before


@pytest.mark.parametrize("mode", [(), ("--check",), ("--diff",)])
def test_prefill_syntax_error(
    tree: Path, capsys: pytest.CaptureFixture[str], mode: tuple[str, ...]
) -> None:
    lines = prefill_text().splitlines(keepends=True)
    broken_line = 20
    lines.insert(broken_line - 1, "    def broken(self:\n")
    (tree / PREFILL_REL).write_text("".join(lines))
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", *mode, tree)
    assert code == 2
    line = one_error_line(err)
    assert re.search(rf"prefill\.py:{broken_line}:", line), line
    assert snapshot(tree) == before


def test_conn_syntax_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conn = tree / CONN_REL
    conn.write_text(conn.read_text() + "def (:\n")
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert re.search(r"conn\.py:\d+:", one_error_line(err))
    assert snapshot(tree) == before


def test_undecodable_prefill(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefill = tree / PREFILL_REL
    prefill.write_bytes(prefill.read_bytes() + b"x = '\xff\xfe'\n")
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert "prefill.py" in one_error_line(err)
    assert snapshot(tree) == before


@pytest.mark.parametrize("mode", [(), ("--check",), ("--diff",)])
def test_refused_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode) -> None:
    tree = make_tree(tmp_path / "tree", failed_branch_raises=True)
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", *mode, tree)
    assert code == 2
    line = one_error_line(
        "\n".join(e for e in err.splitlines() if e.startswith("pdguard: error: "))
    )
    assert "refused" in line
    assert re.search(r"prefill\.py:\d+: ", line), line
    raise_line = (
        prefill_text(failed_branch_raises=True)
        .splitlines()
        .index('                raise Exception("Transferring failed")')
    )
    assert f"{PREFILL_REL}:{raise_line + 1}:" in line
    report = err if mode == ("--diff",) else out  # with --diff, stdout is the patch alone
    assert statuses(report)[INFLIGHT] == "refused"
    assert "--- a/" not in out
    assert snapshot(tree) == before


@pytest.mark.parametrize("mode", [(), ("--check",), ("--diff",)])
def test_refused_fix_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode) -> None:
    tree = make_tree(tmp_path / "tree", failed_branch_raises=True)
    code, out, err = run_main(capsys, "apply", *mode, "--format", "json", tree)
    assert code == 2
    one_error_line(err)
    payload = json.loads(out)
    assert payload["fixes"][INFLIGHT] == "refused"
    assert payload["written"] is False
    assert payload["files_changed"] == []
    assert INFLIGHT in payload["notes"]
    assert "applied" not in payload["fixes"].values()  # nothing was written


@pytest.mark.parametrize("mode", [(), ("--check",)])
def test_symlink_loop_in_the_tree(
    tree: Path, capsys: pytest.CaptureFixture[str], mode: tuple[str, ...]
) -> None:
    loop = tree / "sglang" / "srt" / "disaggregation" / "loop.py"
    loop.symlink_to("loop.py")
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", *mode, tree)
    assert code == 2  # not a traceback (exit 1, which --check reads as "changes needed")
    assert "loop.py" in one_error_line(err)
    assert snapshot(tree) == before


def test_unreadable_file_in_the_tree(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / VERSION_REL).unlink()
    (tree / VERSION_REL).mkdir()
    before = snapshot(tree)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert "version.py" in one_error_line(err)
    assert snapshot(tree) == before


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["apply", "--diff", "--check"])
    assert info.value.code == 2
    # one line, in the documented shape, naming the command
    assert capsys.readouterr().err == (
        "pdguard: error: apply: argument --check: not allowed with argument --diff"
        " (see `pdguard apply --help`)\n"
    )


def test_failed_write_exits_2_and_changes_nothing(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(tree)

    def failing_replace(src, dst):  # type: ignore[no-untyped-def]  # a stand-in for os.replace
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(writer.os, "replace", failing_replace)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert "Permission denied" in one_error_line(err)
    assert snapshot(tree) == before
    assert list(tree.rglob("*.pdguard")) == []


def test_file_edited_during_the_run_is_not_overwritten(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_plan = apply.plan
    edited = prefill_text() + "# edited while pdguard was working\n"

    def plan_then_edit(source_tree, fixes, *args, **options):  # type: ignore[no-untyped-def]  # a stand-in for apply.plan
        result = real_plan(source_tree, fixes, *args, **options)
        (tree / PREFILL_REL).write_text(edited)
        return result

    monkeypatch.setattr(apply, "plan", plan_then_edit)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    assert "changed on disk" in one_error_line(err)
    assert (tree / PREFILL_REL).read_text() == edited
    assert list(tree.rglob("*.pdguard")) == []


# --- encodings, line endings, modes ----------------------------------------------------------


def _apply_and_check_again(tree: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    code, out, err = run_main(capsys, "apply", tree)
    assert (code, err) == (0, ""), out
    assert statuses(out)[INFLIGHT] == "applied"
    data = (tree / PREFILL_REL).read_bytes()
    compile(data, PREFILL_REL, "exec", dont_inherit=True)
    before = snapshot(tree)
    code, out, _ = run_main(capsys, "apply", tree)
    assert code == 0
    assert statuses(out)[INFLIGHT] == "present"
    assert snapshot(tree) == before
    return data


def test_bom_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path / "tree", bom=True)
    data = _apply_and_check_again(tree, capsys)
    assert data.startswith(BOM)
    assert not data[len(BOM) :].startswith(BOM)
    assert BOM not in data[len(BOM) :]
    assert (tree / CONN_REL).read_bytes().startswith(BOM)


def test_crlf_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path / "tree", newline="\r\n", bom=True)
    data = _apply_and_check_again(tree, capsys)
    assert data.startswith(BOM)
    # every line pdguard adds as code ends in CRLF: CRLF dominates by far
    assert data.count(b"\r\n") > 0.9 * data.count(b"\n")
    assert b"\r\r\n" not in data
    # the lines outside string literals all end in CRLF
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        if not line.endswith(b"\r"):
            assert line.startswith(b"        ") or line == b"", (number, line)


def test_crlf_tree_has_no_lone_lf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path / "tree", newline="\r\n")
    assert run_main(capsys, "apply", tree)[0] == 0
    data = (tree / PREFILL_REL).read_bytes()
    assert data.endswith(b"\r\n")
    lone = [n for n, line in enumerate(data.split(b"\n")[:-1], 1) if not line.endswith(b"\r")]
    assert lone == []


@pytest.mark.parametrize("cookie", ["latin-1", "utf-8"])
def test_encoding_cookie_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cookie: str
) -> None:
    tree = make_tree(tmp_path / "tree", encoding_cookie=cookie)
    data = _apply_and_check_again(tree, capsys)
    assert data.startswith(f"# -*- coding: {cookie} -*-\n".encode())
    assert data.decode(cookie)  # still text in the declared encoding


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600])
def test_file_mode_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int) -> None:
    tree = make_tree(tmp_path / "tree", newline="\r\n", bom=True)
    (tree / PREFILL_REL).chmod(mode)
    _apply_and_check_again(tree, capsys)
    assert stat.S_IMODE((tree / PREFILL_REL).stat().st_mode) == mode


# --- symlinks --------------------------------------------------------------------------------


def test_symlink_out_of_the_tree_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = make_tree(tmp_path / "outside")
    tree = make_tree(tmp_path / "tree")
    link = tree / PREFILL_REL
    link.unlink()
    link.symlink_to(outside / PREFILL_REL)
    outside_before = snapshot(outside)
    tree_before = snapshot(tree)
    for mode in ((), ("--check",), ("--diff",)):
        code, _, err = run_main(capsys, "apply", *mode, tree)
        assert code == 2
        assert "outside" in one_error_line(err)
    assert snapshot(outside) == outside_before
    assert snapshot(tree) == tree_before
    assert link.is_symlink()


def test_symlinked_package_dir_out_of_the_tree_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = make_tree(tmp_path / "outside")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "sglang").symlink_to(outside / "sglang", target_is_directory=True)
    before = snapshot(outside)
    code, _, err = run_main(capsys, "apply", tree)
    assert code == 2
    one_error_line(err)
    assert snapshot(outside) == before


def test_symlink_within_the_tree_is_followed_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = make_tree(tmp_path / "tree")
    real = tree / "sglang" / "srt" / "real_prefill.py"
    link = tree / PREFILL_REL
    link.rename(real)
    link.symlink_to(os.path.relpath(real, link.parent))
    code, out, err = run_main(capsys, "apply", tree)
    assert (code, err) == (0, "")
    assert statuses(out)[INFLIGHT] == "applied"
    assert link.is_symlink()
    assert b"pdguard: inflight-deadline" in real.read_bytes()


# --- the installed package, and the module entry point (subprocesses) ------------------------


def _installed_env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site)
    return env


def test_installed(tmp_path: Path) -> None:
    site = make_tree(tmp_path / "site")
    (site / "sglang" / "__init__.py").write_text(
        'raise ImportError("pdguard must not import sglang")\n'
    )
    env = _installed_env(site)
    imported = subprocess.run(
        [sys.executable, "-B", "-c", "import sglang"], env=env, cwd=tmp_path, capture_output=True
    )
    assert imported.returncode != 0
    assert b"pdguard must not import sglang" in imported.stderr

    before = snapshot(site)
    assert not list(site.rglob("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pdguard", "apply", "--installed", "--format", "json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["target"] == "site/sglang"  # below the current directory: relative
    assert payload["fixes"][INFLIGHT] == "applied"
    assert payload["written"] is True
    after = snapshot(site)
    assert after[PREFILL_REL][0] != before[PREFILL_REL][0]
    assert b"pdguard: inflight-deadline" in after[PREFILL_REL][0]
    assert after["sglang/__init__.py"] == before["sglang/__init__.py"]
    assert not list(site.rglob("__pycache__"))  # nothing of sglang was imported or compiled


def test_help_subprocess() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pdguard", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: pdguard")
    assert "apply" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("pyproject.toml", "[tool.isort\nprofile = 'black'\n", "TOMLDecodeError"),
        ("pyproject.toml", "[tool.isort]\nprofile = 'nosuch'\n", "ProfileDoesNotExist"),
        ("setup.cfg", "[isort]\nline_length = abc\n", "ValueError"),
        (".isort.cfg", "[settings]\nprofile = nosuch\n", "ProfileDoesNotExist"),
    ],
)
@pytest.mark.parametrize("mode", [(), ("--check",)])
def test_malformed_isort_settings_are_one_error_line(
    tree: Path, capsys: pytest.CaptureFixture[str], name: str, content: str, why: str, mode
) -> None:
    (tree / name).write_text(content)
    before = snapshot(tree)
    code, out, err = run_main(capsys, "apply", *mode, tree)
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert f"{tree / name}: cannot read its isort settings" in line and why in line, line
    assert "nosuch" not in line and "abc" not in line  # the kind of error, never the content
    assert snapshot(tree) == before
