"""The codemods run both ways: as plain transforms inside ``pdguard apply``, which never imports
``libcst.matchers`` or ``libcst.codemod``, and as LibCST codemod commands through
``python -m libcst.tool codemod`` under their documented class paths (``codemods/command.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pdguard.fix_names import INFLIGHT_DEADLINE, SENDER_ABORT
from pdguard.fixes import FIXES
from tests.helpers import copy_release


def _codemod(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "-x", "--no-format", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_codemod_runs_through_libcst_tool(tmp_path: Path) -> None:
    target = tmp_path / "queue_worker.py"
    target.write_text(
        textwrap.dedent(
            """\
            import sys

            from myapp.jobs import Job


            def wait(job: Job) -> None:
                sys.stdout.write(str(job))
            """
        )
    )
    done = _codemod(
        "pdguard.codemods.isort_imports.AddIsortedImports",
        "--import",
        "time",
        "--import",
        "os:environ",
        str(target),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text().startswith(
        "import sys\nimport time\nfrom os import environ\n\nfrom myapp.jobs import Job\n"
    )


def test_a_fix_codemod_runs_through_libcst_tool_with_its_options(tmp_path: Path) -> None:
    target = tmp_path / "sender.py"
    target.write_text(
        textwrap.dedent(
            """\
            class PipeSender:
                def __init__(self, mgr, room):
                    self.kv_mgr = mgr
                    self.room = room
                    self.init_time = None

                def poll(self):
                    return self.kv_mgr.check_status(self.room)
            """
        )
    )
    command = "pdguard.codemods.sender_bootstrap_timeout.SenderBootstrapTimeout"
    done = _codemod(command, "--class", "PipeSender", str(target), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = target.read_text()
    assert "self.init_time = None" not in out
    assert "self.init_time = time.time()" in out
    assert "pdguard: sender-bootstrap-timeout" in out
    # the command's options come from the transform (add_args), shown by --help
    helped = _codemod(command, "--help", cwd=tmp_path)
    assert "--no-init-time" in helped.stdout


def test_the_commands_are_codemod_commands_built_once() -> None:
    from libcst.codemod import CodemodCommand

    from pdguard.codemods import inflight_deadline, receiver_waiting_timeout

    command = inflight_deadline.InflightDeadline
    assert issubclass(command, CodemodCommand)
    assert command is inflight_deadline.InflightDeadline
    assert command.__module__ == "pdguard.codemods.inflight_deadline"
    assert command.DESCRIPTION == inflight_deadline.InflightDeadlineTransform.DESCRIPTION
    assert {"ReceiverWaitingTimeout", "NixlHeartbeatRooms"} <= set(dir(receiver_waiting_timeout))
    with pytest.raises(AttributeError, match="NoSuchCodemod"):
        _ = receiver_waiting_timeout.NoSuchCodemod


_MODULES_AFTER_APPLY = """
import json, sys
from pdguard.cli import main
code = main(["apply", sys.argv[1], "--select", sys.argv[2], "--format", "json", "-o", sys.argv[3]])
heavy = (["libcst", "matchers"], ["libcst", "codemod"])
loaded = sorted(m for m in sys.modules if m.split(".")[:2] in heavy)
print(json.dumps({"exit": code, "loaded": loaded}))
"""


@pytest.mark.releases
@pytest.mark.parametrize("fix", [fix.name for fix in FIXES])
def test_apply_imports_neither_libcst_matchers_nor_codemod(fix: str, tmp_path: Path) -> None:
    """On 0.4.9 every fix applies (the NIXL sender, the Mooncake receiver, ...); the inflight
    deadline with sender-abort, which it needs there (NIXL's poll() ignores abort())."""
    target = copy_release("0.4.9", tmp_path / "sglang")
    select = f"{SENDER_ABORT},{fix}" if fix == INFLIGHT_DEADLINE else fix
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER_APPLY, str(target), select, str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["exit"] == 0
    assert json.loads((tmp_path / "r.json").read_text())["fixes"][fix] == "applied"
    assert result["loaded"] == []


def _workspace(root: Path, text: str):
    from pdguard.tree import open_tree
    from pdguard.workspace import Workspace

    (root / "sglang/srt/disaggregation").mkdir(parents=True)
    (root / "sglang/srt/disaggregation/relay.py").write_text(text)
    (root / "sglang/srt/disaggregation/prefill.py").write_text("")
    return Workspace(open_tree(root))


def test_workspace_transform_is_kept_by_text_and_options(tmp_path: Path, monkeypatch) -> None:
    """What transforms made of a text is kept for the process (``verify`` meets a file in many
    refs): the same text and options again is not parsed with LibCST; another text, or other
    options, is transformed afresh; an anchor error is kept as one."""
    import pdguard.workspace
    from pdguard.codemods.anchors import AnchorError
    from pdguard.codemods.isort_imports import AddIsortedImportsTransform
    from pdguard.codemods.sender_bootstrap_timeout import SenderBootstrapTimeoutTransform

    rel = "sglang/srt/disaggregation/relay.py"
    text = "import sys\n\n\ndef relay(line):\n    sys.stdout.write(line)\n"
    first = _workspace(tmp_path / "a", text)
    assert first.transform(rel, [AddIsortedImportsTransform(["time"])])
    assert first.text(rel).startswith("import sys\nimport time\n")

    def no_parse(code: str) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(pdguard.workspace, "_parse_cst", no_parse)
    again = _workspace(tmp_path / "b", text)
    assert again.transform(rel, [AddIsortedImportsTransform(["time"])])
    assert again.text(rel) == first.text(rel)
    with pytest.raises(AssertionError, match="parsed again"):  # other options: not kept
        again.transform(rel, [AddIsortedImportsTransform(["os"])])
    changed = _workspace(tmp_path / "c", text.replace("relay(line)", "relay(line, end)"))
    with pytest.raises(AssertionError, match="parsed again"):  # another text: not kept
        changed.transform(rel, [AddIsortedImportsTransform(["time"])])
    monkeypatch.undo()

    for root in ("d", "e"):  # refused, then refused from what was kept, text unchanged
        refused = _workspace(tmp_path / root, text)
        with pytest.raises(AnchorError, match="PipeSender"):
            refused.transform(rel, [SenderBootstrapTimeoutTransform(class_name="PipeSender")])
        assert refused.text(rel) == text and not refused.changed()


_ISORT_AFTER_APPLY = """
import json, sys
from pdguard.cli import main
code = main(["apply", sys.argv[1], "--format", "json", "-o", sys.argv[2]])
print(json.dumps({"exit": code, "isort": "isort" in sys.modules}))
"""


@pytest.mark.releases
def test_apply_that_adds_no_import_never_imports_isort(tmp_path: Path) -> None:
    """0.5.23, with the sender class the deadline dispatches on imported beside its manager
    (the one name the fixes' code needs that it lacks), and no isort settings of its own:
    apply patches three files without loading isort (25 - 30 ms a run)."""
    target = copy_release("0.5.23", tmp_path / "sglang")
    prefill = target / "sglang/srt/disaggregation/prefill.py"
    text = prefill.read_text()
    needed = "from sglang.srt.disaggregation.common.conn import CommonKVManager\n"
    assert text.count(needed) == 1
    prefill.write_text(
        text.replace(needed, needed.replace("Manager\n", "Manager, CommonKVSender\n"))
    )
    done = subprocess.run(
        [sys.executable, "-c", _ISORT_AFTER_APPLY, str(target), str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    report = json.loads((tmp_path / "r.json").read_text())
    assert result == {"exit": 0, "isort": False}
    assert "applied" in report["fixes"].values()
