"""The ``inflight-deadline`` fix: its identity, its proof (PDG001-PDG003, PDG005), detection,
the per-release choices, and the codemod to run (``codemods/inflight_deadline.py``)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from pdguard.checks.classes import find_method
from pdguard.checks.inflight import analyse
from pdguard.checks.kv_senders import BASE_SENDER

from .. import fix_names
from ..sglang_names import INFLIGHT_FUNCTION as FUNCTION
from ..sglang_names import INFLIGHT_QUEUE as QUEUE
from ..sglang_names import KVPOLL, PREFILL_PATH
from .base import Fix, Outcome, Status, has_marker
from .sender_index import sender_index

if TYPE_CHECKING:
    from ..workspace import Workspace

FIX = fix_names.INFLIGHT_DEADLINE
# pdguard's own names in the code it writes.
HELPER = fix_names.INFLIGHT_HELPER
STAMP = fix_names.INFLIGHT_STAMP
TIMEOUT = fix_names.INFLIGHT_TIMEOUT_SETTING

# How an overdue sender is failed (the codemod's ``abort``), as the note says it.
_HOW = {
    "direct": "abort() and a Failed poll",
    "guarded": "abort() where the sender has one, and a Failed poll",
    "none": "a Failed poll",
}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """Method ``name`` of the first top-level class that defines it."""
    classes = (node for node in tree.body if isinstance(node, ast.ClassDef))
    found = find_method(classes, name)
    return found[1] if found is not None else None


def _is_failed_test(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq | ast.Is)
        and isinstance(test.comparators[0], ast.Attribute)
        and test.comparators[0].attr == "Failed"
    )


def _failed_branches(function: ast.FunctionDef) -> list[ast.If]:
    return [n for n in ast.walk(function) if isinstance(n, ast.If) and _is_failed_test(n.test)]


def _missing_pieces(tree: ast.Module) -> list[str]:
    """The parts of pdguard's fix that are not in ``tree``."""
    missing = []
    if not any(
        isinstance(node, ast.Try)
        and any(
            isinstance(s, ast.Assign) and any(getattr(t, "id", None) == TIMEOUT for t in s.targets)
            for s in node.body
        )
        for node in tree.body
    ):
        missing.append(f"the {TIMEOUT} setting")
    if _function(tree, HELPER) is None:
        missing.append(f"{HELPER}()")
    function = _function(tree, FUNCTION)
    if function is None or not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == HELPER
        for n in ast.walk(function)
    ):
        missing.append(f"the {HELPER}() call in {FUNCTION}()")
    stamps = sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == STAMP for t in n.targets)
    )
    appends = sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "append"
        and isinstance(n.func.value, ast.Attribute)
        and n.func.value.attr == QUEUE
    )
    if stamps < appends:
        missing.append(f"the {STAMP} stamp at {appends - stamps} append site(s)")
    return missing


class InflightDeadline(Fix):
    name = FIX
    summary = "a deadline for requests waiting in the prefill inflight queue (prefill.py)"
    rules = ("PDG000", "PDG001", "PDG002", "PDG003", "PDG005")

    def plan(self, workspace: Workspace) -> Outcome:
        tree = workspace.ast(PREFILL_PATH)
        outcome = (
            self._present(workspace.text(PREFILL_PATH), tree)
            or self._upstream(tree)
            or self._refused(tree)
        )
        if outcome is not None:
            return outcome
        return self._apply(workspace)

    # -- the steps, in order: each returns an Outcome when it decides -----------------------

    def _present(self, text: str, tree: ast.Module) -> Outcome | None:
        """pdguard's marker is there: all of the fix (present), or a part (refused)."""
        if not has_marker(text, FIX):
            return None
        missing = _missing_pieces(tree)
        if missing:
            return Outcome(
                Status.REFUSED,
                f"pdguard's marker is in {PREFILL_PATH} but not all of its fix: missing "
                + ", ".join(missing),
                PREFILL_PATH,
            )
        return Outcome(Status.PRESENT, f"marker and deadline found in {PREFILL_PATH}")

    def _upstream(self, tree: ast.Module) -> Outcome | None:
        """A deadline that the PDG001 model proves is already there (written by hand)."""
        if _function(tree, FUNCTION) is None:
            return None  # refused by the next step
        model = analyse(tree)
        valid = model.valid_checks() if model is not None else []
        if not valid:
            return None
        check = valid[0]
        return Outcome(
            Status.UPSTREAM,
            f"a deadline on `{check.attr}` already fails overdue senders before the poll "
            f"all-reduce ({check.method}(), line {check.line})",
        )

    def _refused(self, tree: ast.Module) -> Outcome | None:
        """The release has no Failed branch that cleans up a failed request without crashing."""
        function = _function(tree, FUNCTION)
        if function is None:
            return Outcome(Status.REFUSED, f"no {FUNCTION}() in {PREFILL_PATH}", PREFILL_PATH)
        branches = _failed_branches(function)
        if not branches:
            return Outcome(
                Status.REFUSED,
                f"{FUNCTION}() has no KVPoll.Failed branch to clean up a failed request",
                f"{PREFILL_PATH}:{function.lineno}",
            )
        for branch in branches:
            raising = next((s for s in branch.body if isinstance(s, ast.Raise)), None)
            if raising is not None:
                return Outcome(
                    Status.REFUSED,
                    "the KVPoll.Failed branch of "
                    f"{FUNCTION}() raises instead of aborting the request: a request failed "
                    "at the deadline would crash the scheduler",
                    f"{PREFILL_PATH}:{raising.lineno}",
                )
        return None

    def _abort_style(self, workspace: Workspace) -> str:
        """How an overdue sender can be aborted: "direct" (BaseKVSender has ``abort``),
        "guarded" (only some senders do), "none"."""
        index = sender_index(workspace)
        if index.resolve(BASE_SENDER, "abort") is not None:
            return "direct"
        if any(index.resolve(s, "abort") for s in index.senders()):
            return "guarded"
        return "none"

    def _apply(self, workspace: Workspace) -> Outcome:
        """Run the codemod on ``prefill.py``."""
        from libcst.codemod import CodemodContext

        from pdguard.codemods.anchors import AnchorError
        from pdguard.codemods.inflight_deadline import InflightDeadline as Codemod
        from pdguard.codemods.isort_imports import top_level_bindings

        module = workspace.cst(PREFILL_PATH)
        if KVPOLL not in top_level_bindings(module):
            return Outcome(
                Status.REFUSED, f"{KVPOLL} is not imported in {PREFILL_PATH}", PREFILL_PATH
            )
        abort = self._abort_style(workspace)
        codemod = Codemod(
            CodemodContext(filename=PREFILL_PATH),
            abort=abort,
            isort_config=workspace.isort_config(PREFILL_PATH),
        )
        try:
            module = codemod.transform_module(module)
        except AnchorError as exc:
            return Outcome(Status.REFUSED, str(exc), PREFILL_PATH)
        workspace.set_text(PREFILL_PATH, module.code)
        return Outcome(
            Status.APPLIED,
            f"stamp at the inflight-queue append, deadline before the poll all-reduce in "
            f"{FUNCTION}(); overdue senders are failed with {_HOW[abort]}",
        )
