"""``check --confirm`` (PDG009): the scenarios as a second witness of the static verdict.

Toy trees (the rule's own VALID/INVALID examples, tests/snippets.py) need no network; the
``releases`` tests patch a real release and rebind its sender's ``abort`` at module level."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.checks.rules.pdg009_confirm_disagrees import ConfirmDisagrees
from pdguard.cli import main
from pdguard.commands import apply
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.snippets import TOY_PREFILL, make_toy

PREFILL = "sglang/srt/disaggregation/prefill.py"
MOONCAKE = "sglang/srt/disaggregation/mooncake/conn.py"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_deadline_after_the_all_reduce_is_a_disagreement_with_both_witnesses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PDG002/PDG001 reject it; the scenarios show it bounded, a step later: PDG009."""
    root = make_toy(tmp_path / "toy", ConfirmDisagrees.INVALID[0].code)
    code, out, _ = _run(capsys, "check", str(root), "--no-cache")
    assert code == 1 and "PDG009" not in out  # without --confirm: the static verdict only
    code, out, _ = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert code == 1
    line = next(row for row in out.splitlines() if "PDG009" in row)
    assert f"{PREFILL}:51:5: PDG009 the static rules and the simulation disagree" in line
    assert "PDG001 (line 58) says" in line  # the static witness
    assert "wedge: failed at 301.5 s (deadline 301.1 s)" in line  # the simulated one


def test_agreement_adds_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_toy(tmp_path / "toy", ConfirmDisagrees.VALID[0])
    code, out, _ = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert "PDG009" not in out
    # the unpatched toy: both witnesses say it wedges
    root = make_toy(tmp_path / "unpatched", TOY_PREFILL)
    code, out, _ = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert code == 1 and "PDG001" in out and "PDG009" not in out


def test_code_that_cannot_run_leaves_the_static_verdict_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ConfirmDisagrees.VALID[0].replace(
        "        self.stream_output(done, False)\n",
        "        self.stream_output(done, False)\n        open('/tmp/x').read()\n",
    )
    root = make_toy(tmp_path / "toy", text)
    _, out, err = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert "PDG009" not in out
    assert "warning: not confirmed (PDG009), the static verdict stands alone" in err
    assert "open is a builtin the simulation's sandbox does not give" in err


def test_a_prefix_selects_only_the_static_rules() -> None:
    from pdguard.commands.check import select_codes

    assert checks.CONFIRM_CODE not in select_codes(["PDG00"], None)
    assert checks.CONFIRM_CODE not in select_codes(None, None)
    assert checks.CONFIRM_CODE in select_codes(None, None, confirm=True)
    assert checks.CONFIRM_CODE in select_codes(["PDG009"], None)
    assert checks.CONFIRM_CODE not in select_codes(None, ["PDG009"], confirm=True)


@pytest.fixture(scope="module")
def patched_0514(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("confirm") / "sglang"
    shutil.copytree(fetch_release("0.5.14"), root, symlinks=True)
    apply.write(apply.plan(open_tree(root)))
    return root


@pytest.mark.releases
def test_a_module_level_rebinding_of_abort_is_run_and_disagrees(
    patched_0514: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``MooncakeKVSender.abort = lambda self: None`` at the end of the module: the static
    rules pass, the simulation runs the rebinding (sandboxed) and sees the wedge."""
    root = tmp_path / "rebound"
    shutil.copytree(patched_0514, root, symlinks=True)
    code, out, _ = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert code == 0, out  # the patched release: both witnesses agree
    with (root / MOONCAKE).open("a") as conn:
        conn.write("\n\nMooncakeKVSender.abort = lambda self: None\n")
    code, out, _ = _run(capsys, "check", "--confirm", str(root), "--no-cache")
    assert code == 1
    prefill = [row for row in out.splitlines() if "PDG009" in row and PREFILL in row]
    assert prefill, out
    assert "report nothing" in prefill[0] and "scenario wedge" in prefill[0]
    assert "still waiting after 600 simulated seconds" in prefill[0]


@pytest.mark.releases
def test_a_rebinding_inside_a_block_is_reported_unmodelled(
    patched_0514: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "rebound"
    shutil.copytree(patched_0514, root, symlinks=True)
    with (root / MOONCAKE).open("a") as conn:
        conn.write("\n\nif True:\n    setattr(MooncakeKVSender, 'abort', lambda self: None)\n")
    code, _, err = _run(capsys, "simulate", str(root), "--scenario", "wedge")
    assert code == 2
    lines = (root / MOONCAKE).read_text().splitlines()
    assert f"{MOONCAKE}:{len(lines)}: cannot load: module-level code rebinds" in err
    assert "(unmodelled)" in err


@pytest.fixture()
def rebound_0514(tmp_path: Path) -> Path:
    """Unpatched 0.5.14 whose Mooncake sender's abort() is made a no-op at module level."""
    root = tmp_path / "sglang"
    shutil.copytree(fetch_release("0.5.14"), root, symlinks=True)
    with (root / MOONCAKE).open("a") as conn:
        conn.write("\n\nMooncakeKVSender.abort = lambda self: None\n")
    return root


@pytest.mark.releases
def test_apply_confirms_by_default_and_refuses_what_the_code_does_not_do(
    rebound_0514: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (rebound_0514 / PREFILL).read_text()
    code, _, err = _run(capsys, "apply", str(rebound_0514))
    assert code == 2
    assert "inflight-deadline refused: would be applied, but check still reports PDG009" in err
    assert "scenario wedge" in err
    assert (rebound_0514 / PREFILL).read_text() == before  # nothing written
    code, _, _ = _run(capsys, "apply", str(rebound_0514), "--no-confirm")
    assert code == 0  # the static rules alone pass it


@pytest.mark.releases
def test_verify_confirm_drifts_the_fix_the_scenarios_disagree_with(rebound_0514: Path) -> None:
    from pdguard.commands import verify
    from pdguard.run import Run

    report = verify.verify_tree(open_tree(rebound_0514), "rebound", None)
    assert report.fixes["inflight-deadline"] == "applicable"  # opt-in: not confirmed
    report = verify.verify_tree(open_tree(rebound_0514), "rebound", None, Run(confirm=True))
    assert report.fixes["inflight-deadline"] == "drifted"
    assert report.notes["inflight-deadline"].startswith("PDG009 the static rules and the")
    assert any(f["code"] == "PDG009" for f in report.findings)


@pytest.mark.releases
def test_a_function_local_import_of_a_class_the_tree_has_is_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork's ``from sglang.srt.disaggregation.common.conn import CommonKVReceiver`` inside
    process_decode_queue binds the class the simulation loaded from the tree (was exit 2)."""
    root = tmp_path / "sglang"
    shutil.copytree(fetch_release("0.5.14"), root, symlinks=True)
    decode = root / "sglang/srt/disaggregation/decode.py"
    head = "    def process_decode_queue(self: Scheduler):\n"
    text = decode.read_text()
    assert head in text
    decode.write_text(
        text.replace(
            head,
            head + "        from sglang.srt.disaggregation.common.conn import CommonKVReceiver\n\n"
            "        assert isinstance(CommonKVReceiver, type)\n",
            1,
        )
    )
    code, out, err = _run(capsys, "simulate", str(root), "--scenario", "prefill-gone")
    assert (code, err) == (0, ""), out


def test_the_witnessed_rules_are_the_sides_rules() -> None:
    from pdguard.checks.rules.pdg009_confirm_disagrees import WITNESSED
    from pdguard.simulate import confirm

    assert {rule.code for rule in WITNESSED} == confirm.STATIC_CODES
