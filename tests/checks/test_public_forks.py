"""Shapes met in public SGLang forks (docs/unseen.md, "Public forks"), each in pdguard's own
words: what the fork's code does, not its text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pdguard.checks import Project, run
from pdguard.checks.rule_examples.pdg006 import _BASE
from pdguard.cli import main
from tests.helpers import copy_release

_LOOPED_STAMP = """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll

LIMIT = 300


class MooncakeKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr = mgr
        self.room = bootstrap_room
        self.settled = None
        self.started = None
        self.links = self.kv_mgr.links_for(bootstrap_addr)
{guard}
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        for link in self.links:
            link.push(self.room, kv_indices)
            self.started = time.monotonic()

    def poll(self):
        if self.settled is not None:
            return self.settled
        now_status = self.kv_mgr.check_status(self.room)
        if now_status in (KVPoll.Success, KVPoll.Failed):
            self.settled = now_status
        elif now_status == KVPoll.WaitingForInput and self.started is not None:
            if time.monotonic() - self.started >= LIMIT:
                self.settled = KVPoll.Failed
                return KVPoll.Failed
        return now_status
"""


def _pdg006(guard: str) -> list[str]:
    project = Project(
        {
            "sglang/srt/disaggregation/base/conn.py": _BASE,
            "sglang/srt/disaggregation/mooncake/conn.py": _LOOPED_STAMP.format(guard=guard),
        }
    )
    return [f.message for f in run(project, ["PDG006"])]


@pytest.mark.parametrize(
    "guard",
    [
        "        assert len(self.links) > 0",
        "        assert len(self.links) >= 1",
        "        assert self.links",
        "        assert self.kv_mgr is not None and len(self.links) != 0",
    ],
)
def test_a_waiting_clock_stamped_per_peer_of_a_nonempty_list_is_a_bound(guard: str) -> None:
    """A receiver that sends its indices to each peer and starts its waiting clock in the
    same loop, the peers asserted non-empty in its constructor: the loop runs, so the clock
    does (reported as no waiting timeout at all)."""
    assert _pdg006(guard) == []


@pytest.mark.parametrize(
    "guard",
    [
        "        pass",
        "        assert len(self.links) >= 0",
        "        assert len(self.links) > 0\n        self.links = self.kv_mgr.links_for(None)",
    ],
    ids=["no-assert", "vacuous-assert", "reassigned-after-assert"],
)
def test_a_clock_in_a_loop_that_may_not_run_is_still_reported(guard: str) -> None:
    messages = _pdg006(guard)
    assert len(messages) == 1, messages
    assert "WaitingForInput" in messages[0]


def _wrap_in_try_finally(path: Path, name: str) -> None:
    """``name``'s body moved into ``try:``, a ``finally:`` that times the step after it (as a
    fork that measures each scheduler step does), edited by position."""
    lines = path.read_text().splitlines(keepends=True)
    func = next(
        n
        for n in ast.walk(ast.parse("".join(lines)))
        if isinstance(n, ast.FunctionDef) and n.name == name
    )
    first, last = func.body[0].lineno - 1, func.end_lineno or func.body[-1].lineno
    if isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant):
        first = func.body[1].lineno - 1  # the docstring stays where it is
    indent = " " * func.body[0].col_offset
    body = ["    " + line if line.strip() else line for line in lines[first:last]]
    lines[first:last] = [
        f"{indent}step_started = time.monotonic()\n",
        f"{indent}try:\n",
        *body,
        f"{indent}finally:\n",
        f"{indent}    self.last_step_seconds = time.monotonic() - step_started\n",
    ]
    text = "".join(lines)
    if "\nimport time\n" not in text:
        text = text.replace("\nimport logging\n", "\nimport logging\nimport time\n", 1)
    path.write_text(text)


@pytest.mark.releases
def test_decode_queue_bound_opens_a_gate_inside_a_timed_try(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decode step wrapped in ``try: ... finally:`` keeps its retraction gate one level
    deeper: check reported it (PDG007) but decode-queue-bound found no gate and refused, so
    apply exited 2 and wrote nothing."""
    root = copy_release("0.5.4", tmp_path / "tree")
    path = root / "sglang/srt/disaggregation/decode.py"
    _wrap_in_try_finally(path, "process_decode_queue")
    assert main(["check", "--select", "PDG007", str(root)]) == 1
    capsys.readouterr()
    assert main(["apply", "--select", "decode-queue-bound", str(root)]) == 0, (
        capsys.readouterr().err
    )
    capsys.readouterr()
    assert main(["check", "--select", "PDG007", str(root)]) == 0, capsys.readouterr().out
    func = next(
        n
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name == "process_decode_queue"
    )
    assert not any(isinstance(n, ast.Return) for n in ast.walk(func)), "the early return is gone"


def test_check_claims_nothing_fixable_where_apply_refuses_a_state_flag_sender(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backend whose sender reports Bootstrapping until ``init()`` sets ``init_time`` (a
    state flag, not a clock): sender-bootstrap-timeout refuses it, and apply, all or nothing,
    exits 2. check said every finding was "fixable with `pdguard apply`"."""
    from tests.checks.test_unseen import _unpatched, _write

    root = _write(tmp_path, _unpatched("state-flag-init-time"))
    assert main(["check", str(root), "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["code"] for f in findings} == {"PDG001", "PDG004"}
    assert [f["fixable"] for f in findings] == [False] * len(findings)
    assert main(["apply", "--diff", str(root)]) == 2
    capsys.readouterr()
    # left out, the others are fixable again, and apply agrees
    args = ["--config", str(_ignoring(tmp_path, "sender-bootstrap-timeout"))]
    assert main(["check", str(root), "--format", "json", *args]) == 1
    fixable = {f["code"] for f in json.loads(capsys.readouterr().out)["findings"] if f["fixable"]}
    assert fixable == {"PDG001"}


def _ignoring(tmp_path: Path, fix: str) -> Path:
    path = tmp_path / "pdguard.toml"
    path.write_text(f"[fix.{fix}]\nenabled = false\n")
    return path
