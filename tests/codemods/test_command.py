"""The codemods are plain LibCST codemod commands, defined at import time: ``pdguard apply`` runs
them through a run (``codemods.runner``), ``python -m libcst.tool codemod`` under their
documented class paths (``codemods/command.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pdguard.run import Run
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


def _codemod_classes() -> list[type]:
    import importlib
    import inspect
    import pkgutil

    import pdguard.codemods as package
    from pdguard.codemods.command import ClassCommand, Command

    found = []
    for info in pkgutil.iter_modules(package.__path__, "pdguard.codemods."):
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, Command)
            and value not in (Command, ClassCommand)
            and value.__module__ == module.__name__
        ]
    return found


def test_every_codemod_is_a_codemod_command_defined_at_import_time() -> None:
    from libcst.codemod import CodemodCommand

    from pdguard.codemods import inflight_deadline, receiver_waiting_timeout

    classes = _codemod_classes()
    assert {c.__name__ for c in classes} >= {
        "AddIsortedImports",
        "DecodeQueueBound",
        "InflightDeadline",
        "InflightTimeoutEntry",
        "NixlHeartbeatRooms",
        "PPBootstrapConsensus",
        "RaiseBootstrapTimeoutDefault",
        "ReceiverWaitingTimeout",
        "SenderAbort",
        "SenderBootstrapTimeout",
    }
    for codemod in classes:
        assert issubclass(codemod, CodemodCommand), codemod
        assert codemod.DESCRIPTION, codemod  # what `libcst.tool list` shows
    assert "InflightDeadline" in vars(inflight_deadline)  # a class of the module, not built
    assert "NixlHeartbeatRooms" in vars(receiver_waiting_timeout)


_MODULES_AFTER_APPLY = """
import json, sys
from pdguard.cli import main
code = main(["apply", sys.argv[1], "--check", "--format", "json", "-o", sys.argv[2]])
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "libcst")
print(json.dumps({"exit": code, "loaded": loaded}))
"""


@pytest.mark.releases
def test_apply_on_a_tree_carrying_every_fix_imports_no_libcst(tmp_path: Path) -> None:
    """The pre-commit case: every fix is present, decided with ``ast``; LibCST (and with it
    ``libcst.codemod`` and ``libcst.matchers``) is loaded only when a fix writes."""
    from pdguard.cli import main

    target = copy_release("0.4.9", tmp_path / "sglang")
    assert main(["apply", str(target)]) == 0
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER_APPLY, str(target), str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"exit": 0, "loaded": []}
    assert set(json.loads((tmp_path / "r.json").read_text())["fixes"].values()) == {"present"}


def _workspace(root: Path, text: str, run: Run):
    from pdguard.tree import open_tree
    from pdguard.workspace import Workspace

    (root / "sglang/srt/disaggregation").mkdir(parents=True)
    (root / "sglang/srt/disaggregation/relay.py").write_text(text)
    (root / "sglang/srt/disaggregation/prefill.py").write_text("")
    return Workspace(open_tree(root), run=run)


def test_workspace_transform_is_kept_in_the_run_by_text_and_options(tmp_path: Path) -> None:
    """What codemods made of a text is kept for the run (``verify`` meets a file in many
    refs): the same text and options again is neither parsed with LibCST nor transformed;
    other options are transformed afresh (the text's parse reused), another text is parsed
    and transformed afresh; an anchor error is kept as one; another run keeps nothing of
    this one."""
    from pdguard.codemods.anchors import AnchorError
    from pdguard.codemods.isort_imports import AddIsortedImports
    from pdguard.codemods.sender_bootstrap_timeout import SenderBootstrapTimeout

    rel = "sglang/srt/disaggregation/relay.py"
    text = "import sys\n\n\ndef relay(line):\n    sys.stdout.write(line)\n"
    run = Run(hollow=False)
    first = _workspace(tmp_path / "a", text, run)
    assert first.transform(rel, [AddIsortedImports(first.context(), ["time"])])
    assert first.text(rel).startswith("import sys\nimport time\n")
    assert (len(run.cst_modules), len(run.transformed)) == (1, 1)

    again = _workspace(tmp_path / "b", text, run)
    assert again.transform(rel, [AddIsortedImports(again.context(), ["time"])])
    assert again.text(rel) == first.text(rel)
    assert (len(run.cst_modules), len(run.transformed)) == (1, 1)  # kept: nothing done
    again = _workspace(tmp_path / "c", text, run)
    assert again.transform(rel, [AddIsortedImports(again.context(), ["os"])])
    assert (len(run.cst_modules), len(run.transformed)) == (1, 2)  # other options
    changed = _workspace(tmp_path / "d", text.replace("relay(line)", "relay(line, end)"), run)
    assert changed.transform(rel, [AddIsortedImports(changed.context(), ["time"])])
    assert (len(run.cst_modules), len(run.transformed)) == (2, 3)  # another text

    other = Run(hollow=False)
    elsewhere = _workspace(tmp_path / "e", text, other)
    assert elsewhere.transform(rel, [AddIsortedImports(elsewhere.context(), ["time"])])
    assert (len(other.cst_modules), len(other.transformed)) == (1, 1)  # its own

    for root in ("f", "g"):  # refused, then refused from what was kept, text unchanged
        refused = _workspace(tmp_path / root, text, run)
        codemod = SenderBootstrapTimeout(refused.context(), class_name="PipeSender")
        with pytest.raises(AnchorError, match="PipeSender"):
            refused.transform(rel, [codemod])
        assert refused.text(rel) == text and not refused.changed()
    assert len(run.transformed) == 4


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
