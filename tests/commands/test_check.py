"""``pdguard check`` end to end, in-process, on the hand-written trees of tests/snippets.py.

``make_tree`` has no inflight deadline, so ``check`` reports PDG001 at its keep site (the
``pending.append(req)`` of the inflight loop); after ``pdguard apply`` it is clean. Every
test runs from ``tmp_path`` (``monkeypatch.chdir``, as the ``tree`` fixture of tests/conftest.py
does), so the reported paths start with ``tree/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from pdguard.cli import main
from pdguard.commands import check as checking
from pdguard.commands.check import _escape
from pdguard.errors import UsageError
from tests.helpers import one_error_line, run_main
from tests.paths import SARIF_SCHEMA
from tests.snippets import (
    CONN_REL,
    PREFILL_REL,
    VERSION_REL,
    add_second_keep_site,
    keep_sites,
    make_tree,
)

SCHEMA_PATH = SARIF_SCHEMA
# Every rule, in registry order (PDG000 says what pdguard cannot model; PDG006/PDG007 check
# the decode side).
CODES = (
    *("PDG000", "PDG001", "PDG002", "PDG003", "PDG004", "PDG005", "PDG006", "PDG007", "PDG008"),
    "PDG009",  # check --confirm
)
STATIC = CODES[:-1]  # what check runs without --confirm
SYMBOL = "SchedulerDisaggregationPrefillMixin.process_disagg_prefill_inflight_queue"
CLEAN = "All checks passed!"
TEXT_LINE = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>PDG\d{3}) (?P<message>\S.*)$"
)
GITHUB_LINE = re.compile(
    r"^::error file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
    r"title=(?P<title>PDG\d{3})::(?P<message>(?P<code>PDG\d{3}) \S.*)$"
)


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    return run_main(capsys, "check", *args)


def apply(capsys: pytest.CaptureFixture[str], target: Path) -> None:
    assert main(["apply", str(target)]) == 0
    capsys.readouterr()


def comment_line(root: Path, line: int, comment: str) -> None:
    prefill = root / PREFILL_REL
    lines = prefill.read_text().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + comment + "\n"
    prefill.write_text("".join(lines))


def summary(count: int, suppressed: int = 0) -> str:
    tail = f" ({suppressed} suppressed)" if suppressed else ""
    if not count:
        return CLEAN + tail
    return f"Found {count} finding{'s' if count != 1 else ''}{tail}."


def parse_text(out: str) -> tuple[list[dict[str, str]], str]:
    """The finding lines of the text report (as dicts) and its summary line."""
    *lines, last = [line for line in out.splitlines() if not line.startswith("[*] ")]
    found = []
    for line in lines:
        match = TEXT_LINE.match(line)
        assert match, line
        found.append(match.groupdict())
    return found, last


@pytest.fixture
def tree2(tree: Path) -> Path:
    """``tree`` with two keep sites."""
    return add_second_keep_site(tree)


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    jsonschema.Draft4Validator.check_schema(schema)
    format_checker = jsonschema.FormatChecker()
    # without rfc3986-validator, jsonschema skips the uri formats silently
    assert {"uri", "uri-reference"} <= set(format_checker.checkers)
    return jsonschema.Draft4Validator(schema, format_checker=format_checker)


# --- exit codes, text format ---------------------------------------------------------------


def test_findings_exit_1_with_ruff_like_lines(tree: Path, capsys) -> None:
    code, out, err = run(capsys, "tree")
    assert (code, err) == (1, "")
    found, last = parse_text(out)
    assert [(f["path"], int(f["line"]), int(f["col"]), f["code"]) for f in found] == [
        (f"tree/{PREFILL_REL}", line, col, "PDG001") for line, col in keep_sites(tree)
    ]
    assert all("deadline" in f["message"] for f in found)
    assert last == summary(1) == "Found 1 finding."


def test_one_finding_per_keep_site(tree2: Path, capsys) -> None:
    code, out, _ = run(capsys, "tree")
    assert code == 1
    found, last = parse_text(out)
    assert [(int(f["line"]), int(f["col"])) for f in found] == keep_sites(tree2)
    assert {f["code"] for f in found} == {"PDG001"}
    assert last == "Found 2 findings."


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_clean_after_apply_exit_0(tree2: Path, capsys, fmt: str) -> None:
    apply(capsys, tree2)
    code, out, err = run(capsys, "tree", "--format", fmt)
    assert (code, err) == (0, "")
    if fmt == "text":
        assert out == CLEAN + "\n"
    elif fmt == "github":
        assert out == ""
    elif fmt == "json":
        assert json.loads(out) == {"findings": []}
    else:
        assert json.loads(out)["runs"][0]["results"] == []


def test_paths_are_relative_to_the_current_directory(
    tree: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (line, col), *_ = keep_sites(tree)
    for cwd, arg, shown in [
        (tree.parent, tree, f"tree/{PREFILL_REL}"),  # an absolute argument
        (tree, tree, PREFILL_REL),
        (tree / "sglang" / "srt", tree, "disaggregation/prefill.py"),
        (tree / "sglang" / "srt", "../..", "disaggregation/prefill.py"),
        # outside the current directory: absolute, never ../ (docs/cli.md, "Paths")
        (tree.parent / "elsewhere", "../tree", (tree / PREFILL_REL).resolve().as_posix()),
    ]:
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        code, out, err = run(capsys, arg)
        assert (code, err) == (1, ""), (cwd, arg)
        assert out.splitlines()[0].startswith(f"{shown}:{line}:{col}: PDG001 "), (cwd, arg, out)


def test_two_trees_in_one_run(tree: Path, capsys) -> None:
    make_tree(tree.parent / "other")
    code, out, _ = run(capsys, "tree", "other")
    assert code == 1
    found, last = parse_text(out)
    assert [f["path"] for f in found] == [f"tree/{PREFILL_REL}", f"other/{PREFILL_REL}"]
    assert last == "Found 2 findings."


# --- errors: exit 2, one line on stderr, nothing on stdout ---------------------------------


def test_nonexistent_path(tree: Path, capsys) -> None:
    code, out, err = run(capsys, "no-such-tree")
    assert (code, out) == (2, "")
    assert "no-such-tree" in one_error_line(err)


def test_directory_that_is_not_sglang(tree: Path, capsys) -> None:
    (tree.parent / "empty").mkdir()
    code, out, err = run(capsys, "empty")
    assert (code, out) == (2, "")
    assert "not an SGLang tree" in one_error_line(err)


def test_disaggregation_without_prefill(tree: Path, capsys) -> None:
    (tree / PREFILL_REL).unlink()
    code, out, err = run(capsys, "tree")
    assert (code, out) == (2, "")
    assert "has no prefill.py" in one_error_line(err)


@pytest.mark.parametrize("select", [[], ["--select", "PDG004"], ["--ignore", "PDG001"]])
def test_prefill_with_a_syntax_error(tree: Path, capsys, select: list[str]) -> None:
    """Whatever rules are selected: a file the rules read that does not parse is an error."""
    prefill = tree / PREFILL_REL
    lines = prefill.read_text().splitlines(keepends=True)
    broken = next(n for n, line in enumerate(lines, 1) if "handed_off = []" in line)
    lines[broken - 1] = lines[broken - 1].replace("handed_off = []", "handed_off = [")
    prefill.write_text("".join(lines))
    code, out, err = run(capsys, "tree", *select)
    line = one_error_line(err)
    assert code == 2
    assert re.match(rf"pdguard: error: tree/{re.escape(PREFILL_REL)}:{broken}:\d+: ", line), line
    assert "does not parse" in line
    # and the report says it too, as a diagnostic (ruff's syntax errors), never "passed"
    assert out == f"{line.removeprefix('pdguard: error: ').replace(': ', ': E999 ', 1)}\n" + (
        "Found 1 finding.\n"
    )


def test_conn_with_a_syntax_error_even_when_only_pdg001_runs(tree: Path, capsys) -> None:
    conn = tree / CONN_REL
    text = conn.read_text()
    conn.write_text(text + "\n\nclass Broken(BaseKVSender:\n    pass\n")
    broken = len(text.splitlines()) + 3
    code, out, err = run(capsys, "tree", "--select", "PDG001")
    assert code == 2
    assert out.startswith(f"tree/{CONN_REL}:{broken}:") and " E999 does not parse" in out
    assert re.match(
        rf"pdguard: error: tree/{re.escape(CONN_REL)}:{broken}:\d+: does not parse",
        one_error_line(err),
    )


def test_nul_byte_names_its_file_and_position(tree: Path, capsys) -> None:
    prefill = tree / PREFILL_REL
    lines = prefill.read_text().splitlines(keepends=True)
    where = next(n for n, line in enumerate(lines, 1) if "return []" in line)
    col = lines[where - 1].index("return []") + len("return []") + 1
    lines[where - 1] = lines[where - 1].replace("return []", "return []\0")
    prefill.write_text("".join(lines))
    code, _, err = run(capsys, "tree")
    assert code == 2
    assert one_error_line(err).startswith(
        f"pdguard: error: tree/{PREFILL_REL}:{where}:{col}: does not parse: "
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--select", "PDG999"],
        ["--select", "PDG001,XYZ"],
        ["--select", "PDG001", "--select", "E501"],
        ["--ignore", "PDG1"],
    ],
)
def test_unknown_rule_code(tree: Path, capsys, args: list[str]) -> None:
    code, out, err = run(capsys, "tree", *args)
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert "unknown rule code" in line
    assert all(c in line for c in CODES)  # it lists the known ones


def test_unknown_format_is_a_usage_error(tree: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "tree", "--format", "xml"])
    assert exc.value.code == 2
    _, err = capsys.readouterr()
    assert "--format" in err


# --- json --------------------------------------------------------------------------------


def test_json_format(tree2: Path, capsys) -> None:
    code, out, err = run(capsys, "tree", "--format", "json")
    assert (code, err) == (1, "")
    data = json.loads(out)
    assert list(data) == ["findings"]
    assert len(data["findings"]) == 2
    for finding, (line, col) in zip(data["findings"], keep_sites(tree2), strict=True):
        assert list(finding) == ["code", "path", "line", "col", "symbol", "message", "fixable"]
        assert finding["code"] == "PDG001"
        assert finding["path"] == f"tree/{PREFILL_REL}"
        assert (finding["line"], finding["col"]) == (line, col)
        assert finding["symbol"] == SYMBOL
        assert isinstance(finding["message"], str) and finding["message"]
        assert finding["fixable"] is True  # inflight-deadline fixes PDG001


def test_json_matches_text(tree2: Path, capsys) -> None:
    _, text_out, _ = run(capsys, "tree")
    _, json_out, _ = run(capsys, "tree", "--format", "json")
    found, _ = parse_text(text_out)
    keys = ("path", "line", "col", "code", "message")
    assert [{k: str(f[k]) for k in keys} for f in json.loads(json_out)["findings"]] == [
        {k: f[k] for k in keys} for f in found
    ]


# --- sarif -------------------------------------------------------------------------------


def sarif_log(capsys, *args: str | Path) -> tuple[int, dict]:
    code, out, err = run(capsys, *args, "--format", "sarif")
    assert err == ""
    return code, json.loads(out)


def assert_valid_sarif(validator: jsonschema.Draft4Validator, log: dict) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert errors == []


def test_sarif_with_findings_is_valid(tree2: Path, capsys, sarif_validator) -> None:
    code, log = sarif_log(capsys, "tree")
    assert code == 1
    assert_valid_sarif(sarif_validator, log)
    assert log["version"] == "2.1.0"
    assert len(log["runs"]) == 1
    results = log["runs"][0]["results"]
    assert len(results) == 2
    for result, (line, col) in zip(results, keep_sites(tree2), strict=True):
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == f"tree/{PREFILL_REL}"
        assert location["region"]["startLine"] == line
        assert location["region"]["startColumn"] == col
        logical = result["locations"][0]["logicalLocations"][0]
        assert logical["fullyQualifiedName"] == SYMBOL


def test_sarif_clean_run_is_valid(tree: Path, capsys, sarif_validator) -> None:
    apply(capsys, tree)
    code, log = sarif_log(capsys, "tree")
    assert code == 0
    assert_valid_sarif(sarif_validator, log)
    assert log["runs"][0]["results"] == []
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == list(CODES)


def test_sarif_github_code_scanning_essentials(tree2: Path, capsys) -> None:
    _, log = sarif_log(capsys, "tree")
    (run_,) = log["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "pdguard"
    assert driver["version"]
    rules = driver["rules"]
    assert [rule["id"] for rule in rules] == list(CODES)
    for rule in rules:
        assert rule["shortDescription"]["text"].strip()
        assert rule["fullDescription"]["text"].strip()
        assert rule["name"]
    assert run_["results"]
    for result in run_["results"]:
        assert result["ruleId"] in CODES
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["message"]["text"].strip()
        assert result["level"] in {"error", "warning", "note"}
        assert result["locations"]
        for location in result["locations"]:
            physical = location["physicalLocation"]
            uri = physical["artifactLocation"]["uri"]
            assert not uri.startswith("/") and "://" not in uri and "\\" not in uri, uri
            assert isinstance(physical["region"]["startLine"], int)
            assert physical["region"]["startLine"] >= 1


def test_sarif_uri_is_percent_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, sarif_validator
) -> None:
    monkeypatch.chdir(tmp_path)
    make_tree(tmp_path / "my tree#1")
    code, log = sarif_log(capsys, "my tree#1")
    assert code == 1
    assert_valid_sarif(sarif_validator, log)
    (result,) = log["runs"][0]["results"]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == f"my%20tree%231/{PREFILL_REL}"


# --- github ------------------------------------------------------------------------------


def test_github_format(tree2: Path, capsys) -> None:
    code, out, err = run(capsys, "tree", "--format", "github")
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert len(lines) == 2
    for line, (n, col) in zip(lines, keep_sites(tree2), strict=True):
        match = GITHUB_LINE.match(line)
        assert match, line
        assert match["file"] == f"tree/{PREFILL_REL}"
        assert (int(match["line"]), int(match["col"])) == (n, col)
        assert match["title"] == match["code"] == "PDG001"


@pytest.mark.parametrize(
    ("value", "prop", "escaped"),
    [
        ("plain text", False, "plain text"),
        ("a: b, c", False, "a: b, c"),  # `:` and `,` are fine in the message
        ("a: b, c", True, "a%3A b%2C c"),  # not in a property value
        ("100%", False, "100%25"),
        ("100%", True, "100%25"),
        ("%3A", True, "%253A"),  # `%` first: no double meaning
        ("one\ntwo\r\nthree", False, "one%0Atwo%0D%0Athree"),
        ("one\ntwo", True, "one%0Atwo"),
        ("C:\\dir,x\\f.py", True, "C%3A\\dir%2Cx\\f.py"),
    ],
)
def test_github_escape(value: str, prop: bool, escaped: str) -> None:
    assert _escape(value, prop=prop) == escaped


def test_github_escapes_the_file_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    make_tree(tmp_path / "a,b:c")
    code, out, _ = run(capsys, "a,b:c", "--format", "github")
    assert code == 1
    assert out.startswith(f"::error file=a%2Cb%3Ac/{PREFILL_REL},line=")
    assert GITHUB_LINE.match(out.splitlines()[0])


# --- --select / --ignore -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (["--select", "PDG004"], 0),  # make_tree's only sender never reports Bootstrapping
        (["--select", "PDG00"], 1),  # a prefix
        (["--select", "PDG"], 1),
        (["--select", "pdg001"], 1),
        (["--ignore", "PDG001"], 0),
        (["--select", "PDG004,PDG001"], 1),
        (["--select", " PDG004 , PDG001 "], 1),
        (["--select", "PDG004", "--select", "PDG001"], 1),
        (["--select", "PDG00", "--ignore", "PDG001"], 0),
        (["--ignore", "PDG002,PDG003", "--ignore", "PDG004,PDG005"], 1),
        (["--ignore", "PDG002", "--ignore", "PDG001"], 0),
    ],
)
def test_select_and_ignore(tree: Path, capsys, args: list[str], exit_code: int) -> None:
    code, out, err = run(capsys, "tree", *args)
    assert (code, err) == (exit_code, "")
    found, last = parse_text(out)
    if exit_code:
        assert {f["code"] for f in found} == {"PDG001"}
        assert last == summary(1)
    else:
        assert (found, last) == ([], CLEAN)


@pytest.mark.parametrize(
    ("select", "ignore", "codes"),
    [
        (None, None, STATIC),
        (["PDG004"], None, ("PDG004",)),
        (["PDG00"], None, STATIC),
        (["pdg001,PDG005"], None, ("PDG001", "PDG005")),
        (["PDG005", "PDG001"], None, ("PDG001", "PDG005")),  # in rule order
        (None, ["PDG001"], tuple(c for c in STATIC if c != "PDG001")),
        (None, ["PDG001,PDG002", "PDG003"], ("PDG000", *STATIC[4:])),
    ],
)
def test_select_codes(
    select: list[str] | None, ignore: list[str] | None, codes: tuple[str, ...]
) -> None:
    assert checking.select_codes(select, ignore) == list(codes)


@pytest.mark.parametrize(("select", "ignore"), [([""], None), ([","], None), (["PDG00"], ["PDG0"])])
def test_select_codes_rejects_an_empty_selection(select, ignore) -> None:
    # A CI step with an empty variable must not silently check nothing.
    with pytest.raises(UsageError, match="no rule to run"):
        checking.select_codes(select, ignore)


def test_select_codes_rejects_unknown() -> None:
    with pytest.raises(UsageError, match="unknown rule code 'PDG9'"):
        checking.select_codes(["PDG001", "PDG9"], None)


# --- inline suppressions -----------------------------------------------------------------


# (comment, suppressed, warning on stderr): only the exact forms suppress; anything that starts
# like a suppression but is not one suppresses nothing and is warned about (as ruff's noqa).
MALFORMED = "warning: malformed suppression"
UNKNOWN = "warning: unknown rule code"


@pytest.mark.parametrize(
    ("comment", "suppressed", "warning"),
    [
        ("  # pdguard: ignore[PDG001]", True, None),
        ("  # pdguard: ignore", True, None),  # bare: every code
        ("  #pdguard:ignore[PDG001]", True, None),
        ("  # pdguard: ignore[PDG004, PDG001]", True, None),
        ("  # pdguard: ignore[pdg001]", True, None),
        ("  # noqa: E501  # pdguard: ignore[PDG001]", True, None),
        ("  # pdguard: ignore[PDG004]  # pdguard: ignore[PDG001]", True, None),
        # a reason after `--` (ruff's form), also on a bare suppression
        ("  # pdguard: ignore[PDG001] -- the deadline is enforced by the router", True, None),
        ("  # pdguard: ignore -- vendored, patched upstream", True, None),
        ("  # pdguard: ignore[PDG004] -- reason", False, None),  # still only its codes
        ("  # pdguard: ignore[PDG001] --", False, MALFORMED),  # `--` with no reason
        ("  # pdguard: ignore[PDG001]--reason", False, MALFORMED),
        ("  # pdguard: ignore[PDG004]", False, None),  # another code
        ("  # pdguard: ignore[pdg004]", False, None),
        ("  # pdguard ignore[PDG001]", False, None),  # not a pdguard comment at all
        ("  # pdguard: ignore [PDG001]", False, MALFORMED),
        ("  # pdguard: ignore[PDG00]", False, UNKNOWN),  # codes, not prefixes
        ("  # pdguard: ignore[PDG999]", False, UNKNOWN),
        ("  # pdguard: ignore[]", False, MALFORMED),
        ("  # pdguard: ignore[PDG-1]", False, MALFORMED),
        ("  # pdguard: ignore[PDG001", False, MALFORMED),  # a typo never widens it
        ("  # pdguard: ignore(PDG001)", False, MALFORMED),
        ("  # pdguard: ignore=PDG001", False, MALFORMED),
        ("  # pdguard: ignore: PDG001", False, MALFORMED),
        ("  # pdguard: ignored", False, MALFORMED),
        ("  # pdguard: ignore-next-line", False, MALFORMED),
    ],
)
def test_inline_suppression(
    tree2: Path, capsys, comment: str, suppressed: bool, warning: str | None
) -> None:
    (first, _), (second, second_col) = keep_sites(tree2)
    comment_line(tree2, first, comment)
    code, out, err = run(capsys, "tree")
    assert code == 1
    if warning is None:
        assert err == ""
    else:  # ruff style: path:line:col: warning: ..., once, for the comment's own position
        col = (tree2 / PREFILL_REL).read_text().splitlines()[first - 1].index("#") + 1
        [line] = err.splitlines()
        assert line.startswith(f"tree/{PREFILL_REL}:{first}:{col}: {warning}"), line
    found, last = parse_text(out)
    if suppressed:
        assert [(int(f["line"]), int(f["col"])) for f in found] == [(second, second_col)]
        assert last == "Found 1 finding (1 suppressed)."
    else:
        assert [int(f["line"]) for f in found] == [first, second]
        assert last == "Found 2 findings."


def test_suppression_warning_in_every_format_goes_to_stderr(tree: Path, capsys) -> None:
    ((line, _),) = keep_sites(tree)
    comment_line(tree, line, "  # pdguard: ignore[PDG001")
    code, out, err = run(capsys, "tree", "--format", "json")
    assert code == 1 and len(json.loads(out)["findings"]) == 1
    assert "warning: malformed suppression" in err


def test_suppressing_every_finding_exits_0(tree: Path, capsys) -> None:
    ((line, _),) = keep_sites(tree)
    comment_line(tree, line, "  # pdguard: ignore[PDG001]")
    code, out, _ = run(capsys, "tree")
    assert (code, out) == (0, "All checks passed! (1 suppressed)\n")
    code, out, _ = run(capsys, "tree", "--format", "json")
    assert (code, json.loads(out)) == (0, {"findings": []})
    code, out, _ = run(capsys, "tree", "--format", "github")
    assert (code, out) == (0, "")


def test_suppression_on_another_line_does_not_count(tree: Path, capsys) -> None:
    ((line, _),) = keep_sites(tree)
    comment_line(tree, line - 1, "  # pdguard: ignore")
    code, out, _ = run(capsys, "tree")
    assert code == 1
    assert parse_text(out)[1] == "Found 1 finding."


# --- pre-commit style: files inside the tree ---------------------------------------------


def test_files_inside_the_tree_check_the_tree(tree2: Path, capsys) -> None:
    _, whole, _ = run(capsys, "tree")
    code, out, err = run(capsys, f"tree/{PREFILL_REL}", f"tree/{CONN_REL}")
    assert (code, err) == (1, "")
    assert out == whole
    code, out, _ = run(capsys, f"tree/{VERSION_REL}")  # any file of the tree will do
    assert (code, out) == (1, whole)


def test_files_and_their_tree_are_checked_once(tree: Path, capsys) -> None:
    _, whole, _ = run(capsys, "tree")
    code, out, _ = run(capsys, "tree", f"tree/{PREFILL_REL}", tree / CONN_REL)
    assert (code, out) == (1, whole)
    assert parse_text(out)[1] == "Found 1 finding."


def test_files_outside_any_tree_alone_are_an_error(tree: Path, capsys) -> None:
    (tree.parent / "setup.py").write_text("print('hi')\n")
    (tree.parent / "README.md").write_text("hi\n")
    code, out, err = run(capsys, "setup.py", "README.md")
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert "setup.py" in line and "not in an SGLang tree" in line


def test_files_outside_a_tree_are_ignored_in_a_mix(tree: Path, capsys) -> None:
    (tree.parent / "setup.py").write_text("print('hi')\n")
    _, whole, _ = run(capsys, "tree")
    code, out, err = run(capsys, "setup.py", f"tree/{PREFILL_REL}")
    assert (code, out, err) == (1, whole, "")


def test_nonexistent_file_in_a_mix_is_an_error(tree: Path, capsys) -> None:
    code, out, err = run(capsys, f"tree/{PREFILL_REL}", "tree/sglang/gone.py")
    assert (code, out) == (2, "")
    assert "gone.py" in one_error_line(err)


def test_clean_after_apply_with_files(tree: Path, capsys) -> None:
    apply(capsys, tree)
    code, out, _ = run(capsys, f"tree/{PREFILL_REL}", f"tree/{CONN_REL}")
    assert (code, out) == (0, CLEAN + "\n")


# --- layouts -----------------------------------------------------------------------------


def test_checkout_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    base = make_tree(tmp_path / "checkout" / "python")
    ((line, col),) = keep_sites(base)
    expected = f"checkout/python/{PREFILL_REL}:{line}:{col}: PDG001 "
    code, out, _ = run(capsys, "checkout")
    assert code == 1
    assert out.splitlines()[0].startswith(expected)
    code, out2, _ = run(capsys, f"checkout/python/{PREFILL_REL}")
    assert (code, out2) == (1, out)
    # the pre-commit hook's invocation: `pdguard check .` at the checkout root
    monkeypatch.chdir(tmp_path / "checkout")
    code, out3, _ = run(capsys, ".")
    assert code == 1
    assert out3.splitlines()[0].startswith(f"python/{PREFILL_REL}:{line}:{col}: PDG001 ")
    apply(capsys, tmp_path / "checkout")
    code, out, _ = run(capsys, ".")
    assert (code, out) == (0, CLEAN + "\n")


def test_package_directory(tree: Path, capsys) -> None:
    code, out, _ = run(capsys, "tree/sglang")
    assert code == 1
    assert out.startswith(f"tree/{PREFILL_REL}:")


@pytest.mark.parametrize("inside", [".", "sglang"])
def test_dot_inside_the_tree(
    tree: Path, capsys, monkeypatch: pytest.MonkeyPatch, inside: str
) -> None:
    monkeypatch.chdir(tree / inside)
    code, out, err = run(capsys, ".")
    assert (code, err) == (1, "")
    assert "PDG001" in out


def test_cli_format_choices_match_the_reporters() -> None:
    from pdguard import cli
    from pdguard.commands import check

    [action] = [
        a
        for a in cli.build_parser()._subparsers._group_actions[0].choices["check"]._actions
        if a.dest == "format"
    ]
    assert sorted(action.choices) == sorted(check.FORMATS)


def test_check_does_not_import_libcst() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from pdguard.cli import main; "
        "main(['check', '--help']) if False else None; "
        "import pdguard.commands.check; "
        "print('libcst' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- defaults, --output-file, --exit-zero ---------------------------------------------------


def test_no_path_checks_the_current_directory(tree: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tree)
    code, out, err = main(["check"]), *capsys.readouterr()
    assert (code, err) == (1, "")
    assert out.startswith(f"{PREFILL_REL}:")
    code, dot, _ = run(capsys, ".")
    assert (code, dot) == (1, out)


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_output_file(tree: Path, capsys, fmt: str) -> None:
    code, out, _ = run(capsys, "tree", "--format", fmt)
    code2, out2, err2 = run(capsys, "tree", "--format", fmt, "--output-file", "report.out")
    assert (code2, out2, err2) == (code, "", "")
    assert Path("report.out").read_text() == out


def test_output_file_that_cannot_be_written(tree: Path, capsys) -> None:
    code, out, err = run(capsys, "tree", "--output-file", "no/such/dir/report.sarif")
    assert (code, out) == (2, "")
    assert "no/such/dir/report.sarif" in one_error_line(err)


def test_exit_zero(tree: Path, capsys) -> None:
    code, out, _ = run(capsys, "tree", "--exit-zero")
    assert code == 0 and "PDG001" in out
    code, _, err = run(capsys, "nowhere", "--exit-zero")  # an error is still an error
    assert code == 2 and "nowhere" in one_error_line(err)


def test_sarif_paths_have_a_base_id(tree: Path, capsys) -> None:
    _, log = sarif_log(capsys, "tree")
    [sarif_run] = log["runs"]
    assert sarif_run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}}
    for result in sarif_run["results"]:
        location = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert location["uriBaseId"] == "%SRCROOT%"
        assert (Path.cwd() / location["uri"]).is_file()
