"""The fork shapes issue 24 found ``simulate`` could not load, each made here on a fetched
release by a few pdguard-written lines (no SGLang text is committed), unpatched and patched:

- a fork on 0.5.21 (``tree_cache.supports_mamba()`` in ``optimistic_release_and_requeue``);
- a metrics branch in the inflight function (``self.current_scheduler_metrics_enabled``, called
  as older schedulers spell it, or read as an attribute);
- a function-local import of a module the tree has (prefill: ``KVPoll`` from ``base/conn.py``;
  decode: ``CommonKVReceiver`` from ``common/conn.py``);
- ``kv_mgr.ensure_parallel_info`` (upstream's later name of ``try_ensure_parallel_info``):
  the decode world does not model it yet, so it exits 2 with one line naming it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from pdguard.cli import main
from pdguard.commands import apply
from pdguard.sglang_names import COMMON_CONN_PATH, DECODE_PATH, INFLIGHT_FUNCTION, PREFILL_PATH
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release

BASE = "0.5.21"
# the scenarios that reach the shapes: the inflight function, optimistic prefill's requeue
PREFILL_ROWS = ("wedge", "healthy-traffic", "optimistic-requeue")

METRICS_CALL = """\
if self.current_scheduler_metrics_enabled():
    self.metrics_collector.observe_inflight_queue(len(self.disagg_prefill_inflight_queue))
"""
METRICS_ATTRIBUTE = METRICS_CALL.replace("enabled()", "enabled")
LOCAL_IMPORT = """\
from sglang.srt.disaggregation.base.conn import KVPoll as _Poll

assert _Poll.Failed == 0
"""


def _before_the_poll(text: str, block: str) -> str:
    """``block`` inserted in the inflight function, before its poll all-reduce."""
    function = next(
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.FunctionDef) and n.name == INFLIGHT_FUNCTION
    )
    polls = next(
        stmt
        for stmt in function.body
        if isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Call)
        and ast.unparse(stmt.value.func).startswith("poll_and_all_reduce")
    )
    lines = text.splitlines(keepends=True)
    at = lines[polls.lineno - 1]
    indent = at[: len(at) - len(at.lstrip())]
    added = [indent + line + "\n" if line else "\n" for line in block.splitlines()]
    return "".join([*lines[: polls.lineno - 1], *added, *lines[polls.lineno - 1 :]])


def _tree(root: Path, version: str, edits: dict[str, object], patched: bool) -> Path:
    """A copy of ``version`` with ``edits`` (path -> a function of the text) made, then
    pdguard's fixes applied when ``patched``."""
    shutil.copytree(fetch_release(version), root)
    for rel, edit in edits.items():
        path = root / rel
        assert callable(edit)
        new = edit(path.read_text())
        assert new != path.read_text(), rel
        path.write_text(new)
    if patched:
        result = apply.plan(open_tree(root))
        assert not result.refused, result
        apply.write(result)
    return root


def _simulate(capsys: pytest.CaptureFixture[str], root: Path, *rows: str) -> tuple[int, str]:
    code = main(["simulate", str(root), *(f"--scenario={r}" for r in rows)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out + err


@pytest.mark.releases
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
@pytest.mark.parametrize(
    "block",
    [METRICS_CALL, METRICS_ATTRIBUTE, LOCAL_IMPORT],
    ids=["metrics-call", "metrics-attribute", "local-import"],
)
def test_a_fork_on_0_5_21_runs_and_gives_the_verdict_of_its_code(
    block: str, patched: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edits = {PREFILL_PATH: lambda text: _before_the_poll(text, block)}
    root = _tree(tmp_path / "fork", BASE, edits, patched)
    code, out = _simulate(capsys, root, *PREFILL_ROWS)
    if patched:
        assert code == 0, out
    else:
        assert code == 1, out  # the bug, shown: never exit 2
        assert "still waiting after 600 simulated seconds" in out
    row = next(line for line in out.splitlines() if "optimistic-requeue" in line)
    assert "FAIL" not in row  # the requeue (supports_mamba()) ran on the release's own code


@pytest.mark.releases
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_every_default_scenario_runs_on_the_metrics_fork(
    patched: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate`` with its default scenarios (decode included): exit 1 with the wedge
    unpatched, exit 0 patched; never exit 2."""
    edits = {PREFILL_PATH: lambda text: _before_the_poll(text, METRICS_CALL)}
    root = _tree(tmp_path / "fork", BASE, edits, patched)
    code, out = _simulate(capsys, root)
    assert code == (0 if patched else 1), out


DECODE_HEAD = "    def process_decode_queue(self: Scheduler):\n"
DECODE_IMPORT = (
    "        from sglang.srt.disaggregation.common.conn import CommonKVReceiver\n\n"
    "        assert isinstance(CommonKVReceiver, type)\n"
)


@pytest.mark.releases
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_a_decode_side_local_import_of_a_tree_module_runs(
    patched: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edits = {DECODE_PATH: lambda text: text.replace(DECODE_HEAD, DECODE_HEAD + DECODE_IMPORT, 1)}
    root = _tree(tmp_path / "fork", BASE, edits, patched)
    code, out = _simulate(capsys, root, "pending-unresolved", "prefill-gone")
    # unpatched 0.5.21 re-queues an unresolved pending request for ever (pending-unresolved)
    assert code == (0 if patched else 1), out
    assert ("FAIL" in out) != patched


@pytest.mark.releases
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_ensure_parallel_info_runs_as_upstream_s_earlier_name(
    patched: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Upstream's later name, in a fork of 0.5.23: the decode world's KV manager answers
    ``ensure_parallel_info`` as it answers ``try_ensure_parallel_info``, so the pending
    scenario runs: it waits for ever unpatched and is bounded patched."""
    rename = {
        rel: (lambda text: text.replace("try_ensure_parallel_info", "ensure_parallel_info"))
        for rel in (COMMON_CONN_PATH, DECODE_PATH)
    }
    root = _tree(tmp_path / "fork", "0.5.23", rename, patched)
    code = main(["simulate", str(root), "--scenario=pending-unresolved"])
    out, err = capsys.readouterr()
    assert code == (0 if patched else 1), out + err
    assert ("FAIL" in out) is not patched, out
