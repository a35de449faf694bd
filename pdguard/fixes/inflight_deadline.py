"""The ``inflight-deadline`` fix: detection, the per-release choices, and the codemods to run."""

from __future__ import annotations

import ast

from libcst.codemod import CodemodContext

from pdguard.checks.inflight import analyse
from pdguard.checks.kv_senders import BASE_SENDER
from pdguard.codemods.anchors import AnchorError, has_marker
from pdguard.codemods.inflight_deadline import FIX, FUNCTION, HELPER, QUEUE, STAMP, TIMEOUT
from pdguard.codemods.inflight_deadline import InflightDeadline as InflightDeadlineCodemod
from pdguard.codemods.isort_imports import top_level_bindings

from ..sglang_names import PREFILL_PATH
from ..workspace import Workspace
from .base import Outcome, Status
from .sender_index import sender_index


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            for item in cls.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


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


class InflightDeadline:
    name = FIX

    def plan(self, workspace: Workspace) -> Outcome:
        text = workspace.text(PREFILL_PATH)
        tree = workspace.ast(PREFILL_PATH)
        if has_marker(text, FIX):
            missing = _missing_pieces(tree)
            if missing:
                return Outcome(
                    Status.REFUSED,
                    f"pdguard's marker is in {PREFILL_PATH} but not all of its fix: missing "
                    + ", ".join(missing),
                    PREFILL_PATH,
                )
            return Outcome(Status.PRESENT, f"marker and deadline found in {PREFILL_PATH}")
        function = _function(tree, FUNCTION)
        if function is None:
            return Outcome(Status.REFUSED, f"no {FUNCTION}() in {PREFILL_PATH}", PREFILL_PATH)
        model = analyse(tree)
        valid = model.valid_checks() if model is not None else []
        if valid:
            check = valid[0]
            return Outcome(
                Status.UPSTREAM,
                f"a deadline on `{check.attr}` already fails overdue senders before the poll "
                f"all-reduce ({check.method}(), line {check.line})",
            )
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

        module = workspace.cst(PREFILL_PATH)
        if "KVPoll" not in top_level_bindings(module):
            return Outcome(
                Status.REFUSED, f"KVPoll is not imported in {PREFILL_PATH}", PREFILL_PATH
            )
        index = sender_index(workspace)
        if index.resolve(BASE_SENDER, "abort") is not None:
            abort = "direct"
        elif any(index.resolve(s, "abort") for s in index.senders()):
            abort = "guarded"
        else:
            abort = "none"
        context = CodemodContext(filename=PREFILL_PATH)
        try:
            module = InflightDeadlineCodemod(
                context, abort=abort, isort_config=workspace.isort_config(PREFILL_PATH)
            ).transform_module(module)
        except AnchorError as exc:
            return Outcome(Status.REFUSED, str(exc), PREFILL_PATH)
        workspace.set_text(PREFILL_PATH, module.code)
        how = {
            "direct": "abort() and a Failed poll",
            "guarded": "abort() where the sender has one, and a Failed poll",
            "none": "a Failed poll",
        }[abort]
        return Outcome(
            Status.APPLIED,
            f"stamp at the inflight-queue append, deadline before the poll all-reduce in "
            f"{FUNCTION}(); overdue senders are failed with {how}",
        )
