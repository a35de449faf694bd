"""Verdicts on code pdguard has never seen: fork shapes, hand-written fixes, hostile input
(``tests/corpus.py``), and the targets and comments a user gets wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard.errors import TargetError
from pdguard.tree import open_tree
from tests.corpus import CASES, PREFILL, Case
from tests.snippets import make_tree


def test_a_target_holding_two_sglang_trees_is_ambiguous(tmp_path: Path) -> None:
    make_tree(tmp_path)
    make_tree(tmp_path / "python")
    with pytest.raises(TargetError) as info:
        open_tree(tmp_path)
    message = str(info.value)
    assert "two SGLang trees" in message
    assert str(tmp_path / "sglang") in message
    assert str(tmp_path / "python" / "sglang") in message


def _pdg005(prefill_text: str) -> list[tuple[int, str]]:
    from pdguard.checks import Project, run
    from tests.corpus import _BASE, BASE_CONN, PREFILL

    found = run(Project({PREFILL: prefill_text, BASE_CONN: _BASE}), ["PDG005"])
    return [(f.line, f.message) for f in found]


@pytest.mark.parametrize(
    ("imports", "replace", "expected"),
    [
        # the binding in force is datetime.time: time.monotonic() raises AttributeError
        ("import time\nfrom datetime import time", None, "`time` is bound to `datetime.time`"),
        ("import time as t\ntime = None", None, "`time` is bound to an assignment"),
        # a local assignment shadows the module in one function only
        (
            "import time",
            ("now = time.monotonic()", "time = 5\n        now = time.monotonic()"),
            "`time` is bound to an assignment (line 44) in _expire_inflight()",
        ),
    ],
)
def test_pdg005_reports_a_shadowed_binding(
    imports: str, replace: tuple[str, str] | None, expected: str
) -> None:
    from tests.corpus import prefill

    text = prefill(imports=imports)
    if replace:
        text = text.replace(*replace)
    found = _pdg005(text)
    assert found, "the shadowed use was not reported"
    assert all(expected in message for _, message in found), found


@pytest.mark.parametrize(
    "imports",
    [
        "from datetime import time\nimport time",  # import time is the binding in force
        "import time\ntry:\n    import time\nexcept ImportError:\n    time = None",
        "import time\nfrom datetime import time as dtime",
        "from time import monotonic\nimport time",
    ],
)
def test_pdg005_accepts_the_right_binding(imports: str) -> None:
    from tests.corpus import prefill

    assert _pdg005(prefill(imports=imports)) == []


KNOWN = ("PDG001", "PDG004")


@pytest.mark.parametrize(
    ("comment", "codes"),
    [
        ("# pdguard: ignore", None),
        ("# pdguard: ignore[PDG004]", {"PDG004"}),
        ("# pdguard: ignore[PDG001, PDG004]", {"PDG001", "PDG004"}),
        ("#pdguard:ignore[pdg004]", {"PDG004"}),
        ("# pdguard: ignore[PDG004]  # decode has its own timeout", {"PDG004"}),
    ],
)
def test_exact_suppressions(comment: str, codes: set[str] | None) -> None:
    from pdguard.suppressions import parse

    found = parse(f"x = 1  {comment}\n", KNOWN)
    assert found.warnings == []
    assert found.by_line == {1: None if codes is None else frozenset(codes)}


@pytest.mark.parametrize(
    ("comment", "why"),
    [
        ("# pdguard: ignore[PDG001", "malformed"),
        ("# pdguard: ignore(PDG001)", "malformed"),
        ("# pdguard: ignore=PDG001", "malformed"),
        ("# pdguard: ignore: PDG001", "malformed"),
        ("# pdguard: ignored", "malformed"),
        ("# pdguard: ignore [PDG001]", "malformed"),
        ("# pdguard: ignore[PDG04]", "unknown rule code PDG04"),
        ("# pdguard: ignore[PDG999]", "unknown rule code PDG999"),
        ("# pdguard: ignore[PDG001, PDG999]", "unknown rule code PDG999"),
    ],
)
def test_a_typo_never_widens_a_suppression(comment: str, why: str) -> None:
    from pdguard.suppressions import parse

    found = parse(f"x = 1\ny = 2  {comment}\n", KNOWN)
    assert not found.suppresses(2, "PDG001")
    assert not found.suppresses(2, "PDG004")
    [warning] = found.warnings
    assert (warning.line, warning.col) == (2, 8)
    assert why in warning.message


def test_markers_and_strings_are_not_suppressions() -> None:
    from pdguard.suppressions import parse

    text = 'x = 1  # pdguard: inflight-deadline\ns = "# pdguard: ignore"\n'
    found = parse(text, KNOWN)
    assert (found.by_line, found.warnings) == ({}, [])


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_suppressions_deep_in_a_module_only_in_comments(newline: str) -> None:
    """Each candidate line is tokenized from the statement that holds it: a ``#`` in a
    string spanning lines is text, a comment in a nested block, a header, between methods or
    after a decorator is a comment."""
    from pdguard.suppressions import parse

    text = newline.join(
        [
            "class Box:",  # 1
            "    # pdguard: ignore[PDG004]",  # 2: between statements
            "    @staticmethod",  # 3
            "    def make(  # pdguard: ignore[PDG001]",  # 4: a header after a decorator
            "        a,",
            "    ):",
            '        note = """',  # 7
            "        # pdguard: ignore",  # 8: inside a string
            '        """',
            "        for item in a:",
            "            if item:",
            "                pass  # pdguard: ignore[PDG001, PDG004]",  # 12
            "        return note",
            "",
        ]
    )
    found = parse(text, KNOWN)
    assert found.warnings == []
    assert found.by_line == {
        2: frozenset({"PDG004"}),
        4: frozenset({"PDG001"}),
        12: frozenset({"PDG001", "PDG004"}),
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_verdict(case: Case) -> None:
    """A correct tree gets no finding; an unsafe one gets at least the hazard's codes."""
    from tests.corpus import verdicts

    got = verdicts(case)
    if case.correct:
        assert got == set(), f"false positive on {case.name}: {case.why}"
    else:
        assert case.expect <= got, f"false negative on {case.name}: {case.why}"


# -- apply on fork shapes: it agrees with check, and one backend does not block the rest ---------


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "sglang" / "version.py").write_text('__version__ = "0.0.1-fork"\n')
    return root


def _apply(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    import json

    from pdguard.cli import main

    code = main(["apply", *map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out)["fixes"] if out.strip().startswith("{") else out, err


def _unpatched(case: str) -> dict[str, str]:
    """The corpus case's files with its deadline taken out (what a fork starts from)."""
    from tests.corpus import CASES

    files = dict(next(c for c in CASES if c.name == case).files)
    files[PREFILL] = files[PREFILL].replace("        self._expire_inflight()\n", "")
    return files


@pytest.mark.parametrize("case", ["failed-or-abort", "failed-in-tuple", "or-poll-sender"])
def test_apply_fixes_fork_shapes_and_check_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    from pdguard.commands.check import check_tree

    root = _write(tmp_path, _unpatched(case))
    code, fixes, err = _apply(capsys, root)
    assert code == 0, err
    assert fixes["inflight-deadline"] == "applied"
    prefill_codes = {"PDG000", "PDG001", "PDG002", "PDG003", "PDG004", "PDG005", "PDG008"}
    assert [f for f in check_tree(open_tree(root)).findings if f.code in prefill_codes] == []


_HOSTILE_ENTRIES = [c.name for c in CASES if c.name.startswith("entry-")]


@pytest.mark.parametrize("case", _HOSTILE_ENTRIES)
def test_apply_refuses_where_requests_enter_in_a_way_it_does_not_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """A way into the queue the model does not follow (getattr, a bound method, ``[*q, r]``,
    ``setattr``, ``map``, ``__dict__``/``vars()``, a tuple-unpacked alias): apply must not claim
    the stamp is at every entry; it refuses, naming PDG000, and writes nothing."""
    root = _write(tmp_path, _unpatched(case))
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    code, fixes, err = _apply(capsys, root)
    assert code == 2
    assert fixes["inflight-deadline"] == "refused"
    assert "check still reports PDG000" in err
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before


def test_a_sender_pdguard_cannot_fix_is_refused_and_can_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pdguard.commands.check import check_tree

    root = _write(tmp_path, _unpatched("state-flag-init-time"))
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    code, _, err = _apply(capsys, root)
    assert code == 2
    assert "forkbackend/conn.py:14: sender-bootstrap-timeout refused" in err
    assert "state flag" in err
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before  # nothing written

    code, fixes, err = _apply(capsys, root, "--ignore", "sender-bootstrap-timeout")
    assert code == 0, err
    assert fixes == {
        "sender-abort": "applied",  # the fork's sender had only the base's stub abort()
        "inflight-deadline": "applied",
        "sender-bootstrap-timeout": "skipped",
        "receiver-waiting-timeout": "not-applicable",  # the fork has no decode side
        "decode-queue-bound": "not-applicable",
    }
    codes = {f.code for f in check_tree(open_tree(root)).findings}
    assert "PDG001" not in codes and "PDG004" in codes  # the sender is still reported


def test_apply_select_names_unknown_fixes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pdguard.cli import main

    _write(tmp_path, _unpatched("failed-or-abort"))
    assert main(["apply", str(tmp_path), "--select", "inflight-deadlin"]) == 2
    err = capsys.readouterr().err
    assert "unknown fix 'inflight-deadlin'" in err and len(err.strip().splitlines()) == 1


def test_apply_refuses_what_check_would_reject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The deadline anchors, but a request also enters the queue through a helper pdguard
    cannot follow: check reports PDG000, so apply must not say applied."""
    files = _unpatched("stamp-before-append")
    files[PREFILL] = files[PREFILL].replace(
        "            self.disagg_prefill_inflight_queue.append(req)\n",
        "            self.disagg_prefill_inflight_queue.append(req)\n"
        "        register(self.disagg_prefill_inflight_queue)\n",
        1,
    )
    root = _write(tmp_path, files)
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    code, _, err = _apply(capsys, root)
    assert code == 2
    assert "inflight-deadline refused: would be applied, but check still reports PDG000" in err
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before


@pytest.mark.parametrize(
    ("imports", "spelled"),
    [
        ("from datetime import time", "_time.monotonic()"),  # time is datetime's
        ("import time\nfrom datetime import time", "_time.monotonic()"),  # rebound after
        ("import time as t", "t.monotonic()"),  # a right binding is reused
        ("from time import monotonic as now", "now()"),
    ],
)
def test_apply_binds_time_to_the_time_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], imports: str, spelled: str
) -> None:
    import isort

    from pdguard.commands.check import check_tree
    from tests.corpus import prefill

    text = prefill(imports=imports, expire=False, before="", stamp_before="")
    root = _write(tmp_path, {PREFILL: text, "sglang/srt/disaggregation/base/conn.py": ""})
    code, fixes, err = _apply(capsys, root)
    assert code == 0, err
    assert fixes["inflight-deadline"] == "applied"
    patched = (root / PREFILL).read_text()
    assert spelled in patched
    assert [f for f in check_tree(open_tree(root)).findings if f.code == "PDG005"] == []
    config = isort.Config(profile="black", known_first_party=frozenset({"sglang"}))
    assert isort.code(patched, config=config) == patched  # isort shows nothing new
    namespace: dict[str, object] = {}
    exec(
        compile(
            "\n".join(
                line for line in patched.splitlines() if "import" in line and "sglang" not in line
            ),
            "p",
            "exec",
        ),
        namespace,
    )
    import time

    bound = namespace.get(spelled.split(".")[0].rstrip("()"))
    assert bound is time or bound is time.monotonic  # the time module's, not datetime's


@pytest.mark.parametrize("case", ["extend-unstamped", "insert-unstamped", "iadd-unstamped"])
def test_apply_stamps_every_way_into_the_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Requests enter through append and through extend / insert / +=: apply stamps each way
    (a loop over a named batch), and check then proves it."""
    from pdguard.commands.check import check_tree

    files = _unpatched(case)
    # the fork's own (partial) deadline and stamps go: apply starts from no deadline at all
    files[PREFILL] = files[PREFILL].replace(
        '                    if getattr(req, "entered_at", None) is None:\n'
        "                        req.entered_at = time.monotonic()\n",
        "",
    )
    root = _write(tmp_path, files)
    code, fixes, err = _apply(capsys, root)
    assert code == 0, err
    assert fixes["inflight-deadline"] == "applied"
    patched = (root / PREFILL).read_text()
    assert patched.count("inflight_queue_entry_time = time.monotonic()") == 2
    prefill_codes = {"PDG000", "PDG001", "PDG002", "PDG003", "PDG005"}
    assert [f for f in check_tree(open_tree(root)).findings if f.code in prefill_codes] == []


def test_apply_refuses_an_entry_it_cannot_stamp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _unpatched("extend-unstamped")
    files[PREFILL] = files[PREFILL].replace(
        "extend(batch.retried)", "extend(r for r in batch.retried if r.ok)"
    )
    root = _write(tmp_path, files)
    code, _, err = _apply(capsys, root)
    assert code == 2
    assert "extend() of an expression pdguard cannot stamp without evaluating it twice" in err


def test_a_keep_through_the_queue_itself_needs_no_stamp_and_reapplies_present(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request taken from the queue and appended back to it inside the inflight function is
    a keep, not an entry: apply stamps only real entries, and a second run says present."""
    files = _unpatched("stamp-before-append")
    files[PREFILL] = files[PREFILL].replace(
        "            if poll in [KVPoll.WaitingForInput, KVPoll.Transferring]:\n",
        "            if poll in [KVPoll.WaitingForInput, KVPoll.Transferring]:\n"
        "                self.disagg_prefill_inflight_queue.append(req)\n",
        1,
    )
    root = _write(tmp_path, files)
    code, fixes, err = _apply(capsys, root)
    assert code == 0 and fixes["inflight-deadline"] == "applied", err
    code, fixes, err = _apply(capsys, root)
    assert code == 0 and fixes["inflight-deadline"] == "present", err
