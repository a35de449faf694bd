"""The ``inflight-deadline`` fix: its identity, its proof (PDG001-PDG003, PDG005), detection,
the per-release choices, and the codemod to run (``codemods/inflight_deadline.py``)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from pdguard.checks.classes import find_method
from pdguard.checks.models.kv_senders import ClassIndex
from pdguard.checks.nodes import walk
from pdguard.checks.project import inflight_model

from .. import fix_names
from ..sglang_names import (
    BOOTSTRAP_TIMEOUT_ENV,
    DISAGGREGATION_DIR,
    ENVIRON_PATH,
    INFLIGHT_TIMEOUT_ENV,
    KVPOLL,
    MANAGER_CONCLUDE_FAILURE,
    MANAGER_RECORD_FAILURE,
    PP_MIXIN_PATH,
    PREFILL_PATH,
    SCHEDULER_PATH,
    WAITING_TIMEOUT_ENV,
)
from ..sglang_names import INFLIGHT_FUNCTION as FUNCTION
from ..sglang_names import KVPoll as KVPollState
from .base import Fix, Outcome, Status, has_marker
from .sender_index import sender_index

if TYPE_CHECKING:
    from ..checks import Project
    from ..run import Run
    from ..workspace import Workspace

FIX = fix_names.INFLIGHT_DEADLINE
SENDER_ABORT = fix_names.SENDER_ABORT
# pdguard's own names in the code it writes.
HELPER = fix_names.INFLIGHT_HELPER
STAMP = fix_names.INFLIGHT_STAMP
READER = fix_names.INFLIGHT_TIMEOUT_READER
# The registry entries whose presence makes the release's convention the registry (0.5.8+).
_SIBLINGS = (WAITING_TIMEOUT_ENV, BOOTSTRAP_TIMEOUT_ENV)
# How the timeout becomes the room's failure reason (InflightDeadline._senders).
_RECORD, _REPLACE, _CONCLUDE = "record", "replace", "conclude"


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """Method ``name`` of the first top-level class that defines it."""
    classes = (node for node in tree.body if isinstance(node, ast.ClassDef))
    found = find_method(classes, name)
    return found[1] if found is not None else None


_POLL_VALUES = {state.name: state.value for state in KVPollState}
_FAILED = KVPollState.Failed.value


def _poll_value(node: ast.expr) -> int | None:
    """``KVPoll.X`` as its value."""
    if isinstance(node, ast.Attribute) and node.attr in _POLL_VALUES:
        return _POLL_VALUES[node.attr]
    return None


def _when_failed(
    test: ast.expr, helpers: dict[str, ast.FunctionDef], depth: int = 0
) -> bool | None:
    """Is ``test`` true when the (reduced) poll it looks at is Failed? True, False, or None
    when it depends on something else (``req.to_abort``) or pdguard cannot tell."""
    if isinstance(test, ast.BoolOp):
        values = [_when_failed(v, helpers, depth) for v in test.values]
        if isinstance(test.op, ast.Or):
            return True if True in values else (False if all(v is False for v in values) else None)
        return False if False in values else (True if all(v is True for v in values) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _when_failed(test.operand, helpers, depth)
        return None if value is None else not value
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _compare_when_failed(test.left, test.ops[0], test.comparators[0])
    if isinstance(test, ast.Call) and depth < 2:
        # a helper predicate: self._is_failed(poll) whose body is `return <test>`
        func = test.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        helper = helpers.get(name or "")
        if helper is not None and len(helper.body) == 1 and isinstance(helper.body[0], ast.Return):
            returned = helper.body[0].value
            return _when_failed(returned, helpers, depth + 1) if returned is not None else None
    return None


def _compare_when_failed(left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool | None:
    value = _poll_value(right)
    states = _states(right)
    if value is None and states is None:
        value, states, left = _poll_value(left), _states(left), right  # KVPoll.X == poll
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(
            type(op), op
        )
    if _poll_value(left) is not None:
        return None  # KVPoll.X against KVPoll.Y: not about the poll
    if states is not None and isinstance(op, ast.In | ast.NotIn):
        inside = _FAILED in states
        return inside if isinstance(op, ast.In) else not inside
    if value is None:
        return None
    outcome = {
        ast.Eq: value == _FAILED,
        ast.Is: value == _FAILED,
        ast.NotEq: value != _FAILED,
        ast.IsNot: value != _FAILED,
        ast.Lt: value > _FAILED,
        ast.LtE: value >= _FAILED,
        ast.Gt: value < _FAILED,
        ast.GtE: value <= _FAILED,
    }
    return outcome.get(type(op))


def _states(node: ast.expr) -> set[int] | None:
    """``[KVPoll.A, KVPoll.B]`` (a list, tuple or set of poll states) as their values."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        values = [_poll_value(e) for e in node.elts]
        if values and all(v is not None for v in values):
            return {v for v in values if v is not None}
    return None


def _chain_tests_poll(node: ast.If) -> bool:
    """Does any test of the ``if``/``elif`` chain starting at ``node`` look at a poll state?"""
    while True:
        if any(isinstance(n, ast.expr) and _poll_value(n) is not None for n in ast.walk(node.test)):
            return True
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        return False


def _failed_branches(
    function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]
) -> list[list[ast.stmt]]:
    """The statements that run when the reduced poll is Failed: in every ``if``/``elif``/
    ``else`` chain and ``match`` on a poll state, the first branch whose test holds for Failed
    (``poll == KVPoll.Failed``, ``... or req.to_abort``, ``poll in (...)``, a helper
    predicate, ``else`` after tests that all fail, ``case KVPoll.Failed``)."""
    branches: list[list[ast.stmt]] = []
    nested = {
        id(n.orelse[0])
        for n in walk(function)
        if isinstance(n, ast.If) and len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If)
    }
    for node in walk(function):
        if isinstance(node, ast.If) and id(node) not in nested and _chain_tests_poll(node):
            branches += _chain_branches(node, helpers)
        elif isinstance(node, ast.Match):
            branch = _match_branch(node)
            if branch:
                branches.append(branch)
    return branches


def _chain_branches(node: ast.If, helpers: dict[str, ast.FunctionDef]) -> list[list[ast.stmt]]:
    """The branches of an ``if``/``elif``/``else`` chain that can run for a Failed poll: the
    first whose test holds, and before it each whose test depends on something else."""
    found: list[list[ast.stmt]] = []
    current: ast.If = node
    while True:
        holds = _when_failed(current.test, helpers)
        if holds is not False:
            found.append(current.body)
            if holds:
                return found
        if len(current.orelse) == 1 and isinstance(current.orelse[0], ast.If):
            current = current.orelse[0]
            continue
        if current.orelse:
            found.append(current.orelse)
        return found


def _match_branch(node: ast.Match) -> list[ast.stmt] | None:
    for case in node.cases:
        patterns = (
            case.pattern.patterns if isinstance(case.pattern, ast.MatchOr) else [case.pattern]
        )
        for pattern in patterns:
            if isinstance(pattern, ast.MatchValue) and _poll_value(pattern.value) == _FAILED:
                return case.body
            if isinstance(pattern, ast.MatchAs) and pattern.pattern is None and case.guard is None:
                return case.body  # `case _:` after cases that do not match Failed
    return None


def registry_entry(environ: ast.Module | None, name: str) -> str | None:
    """The Env type of ``name``'s entry in the env registry (``environ.py``:
    ``class Envs: NAME = EnvInt(300)``), if it has one."""
    for cls in environ.body if environ is not None else []:
        if isinstance(cls, ast.ClassDef):
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [getattr(t, "id", None) for t in stmt.targets] == [name]
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name)
                ):
                    return stmt.value.func.id
    return None


def convention(environ: ast.Module | None) -> str:
    """How the release reads its disaggregation timeouts: its env registry where the sibling
    timeouts are entries of it (0.5.8+), else ``get_int_env_var`` (0.4.7 - 0.5.7)."""
    if any(registry_entry(environ, sibling) for sibling in _SIBLINGS):
        return fix_names.ENV_REGISTRY
    return fix_names.ENV_GET_INT


def _reads_timeout(helper: ast.FunctionDef | None, style: str) -> bool:
    """Does the helper read the timeout as ``style`` says: ``<envs>.NAME.get()``, or a call
    of the module's reader?"""
    for node in walk(helper) if helper is not None else []:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if style == fix_names.ENV_REGISTRY:
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "get"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == INFLIGHT_TIMEOUT_ENV
            ):
                return True
        elif _reads_env(node) or (isinstance(func, ast.Name) and func.id == READER):
            return True  # (READER: the module-level reader an earlier pdguard wrote)
    return False


def _reads_env(call: ast.Call) -> bool:
    """``get_int_env_var("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", ...)``."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else None
    if isinstance(func, ast.Attribute):
        name = func.attr
    return name == fix_names.ENV_GET_INT and any(
        isinstance(a, ast.Constant) and a.value == INFLIGHT_TIMEOUT_ENV for a in call.args
    )


def _missing_pieces(tree: ast.Module, environ: ast.Module | None, run: Run) -> list[str]:
    """The parts of pdguard's fix that are not in ``tree`` (``prefill.py``) or, where the
    release reads its timeouts from its env registry, ``environ`` (``environ.py``)."""
    missing = []
    style = convention(environ)
    helper = _function(tree, HELPER)
    if style == fix_names.ENV_REGISTRY:
        if registry_entry(environ, INFLIGHT_TIMEOUT_ENV) is None:
            missing.append(f"the {INFLIGHT_TIMEOUT_ENV} entry in {ENVIRON_PATH}")
        if helper is not None and not _reads_timeout(helper, style):
            missing.append(f"the read of envs.{INFLIGHT_TIMEOUT_ENV} in {HELPER}()")
    elif helper is not None and not _reads_timeout(helper, style):
        missing.append(f"the {fix_names.ENV_GET_INT}({INFLIGHT_TIMEOUT_ENV!r}, ...) in {HELPER}()")
    if _function(tree, HELPER) is None:
        missing.append(f"{HELPER}()")
    function = _function(tree, FUNCTION)
    if function is None or not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == HELPER
        for n in walk(function)
    ):
        missing.append(f"the {HELPER}() call in {FUNCTION}()")
    model = inflight_model(tree, run)
    unstamped = [e for e in model.unstamped() if e.line] if model is not None else []
    if unstamped:
        lines = ", ".join(str(e.line) for e in unstamped)
        missing.append(f"the {STAMP} stamp where requests enter the queue (line {lines})")
    return missing


class InflightDeadline(Fix):
    name = FIX
    summary = "a deadline for requests waiting in the prefill inflight queue (prefill.py)"
    rules = ("PDG000", "PDG001", "PDG002", "PDG003", "PDG005")
    # PDG000 (code pdguard cannot model) and a hand-written deadline's faults (PDG002, PDG003,
    # PDG005) make the fix refuse: it writes a deadline only where there is none
    fixes = ("PDG001",)
    reads = (DISAGGREGATION_DIR, ENVIRON_PATH)
    concluding = ""  # "module:Class" whose senders are failed through conclude_failure()

    def fixable_in(self, project: Project) -> bool:
        """No marker (a partly removed fix is ``--repair``'s), no deadline already there (its
        status would be upstream), and a Failed branch to clean up in: ``plan``'s own tests."""
        tree = project.tree(PREFILL_PATH)
        if tree is None or has_marker(project.texts[PREFILL_PATH], FIX):
            return False
        if self._refused(tree) is not None:
            return False
        model = project.inflight
        return model is None or not model.valid_checks(project.classes)

    def plan(self, workspace: Workspace) -> Outcome:
        tree = workspace.ast(PREFILL_PATH)
        outcome = (
            self._present(workspace, tree) or self._upstream(workspace, tree) or self._refused(tree)
        )
        if outcome is not None:
            return outcome
        return self._apply(workspace)

    # -- the steps, in order: each returns an Outcome when it decides -----------------------

    def _present(self, workspace: Workspace, tree: ast.Module) -> Outcome | None:
        """pdguard's marker is there (in ``prefill.py`` or the env registry): all of the fix
        (present), or a part (refused)."""
        environ = _environ(workspace)
        marked = [
            rel
            for rel in (PREFILL_PATH, ENVIRON_PATH)
            if (rel == PREFILL_PATH or environ is not None) and has_marker(workspace.text(rel), FIX)
        ]
        if not marked:
            return None
        missing = _missing_pieces(tree, environ, workspace.run)
        if missing:
            return Outcome(
                Status.REFUSED,
                f"pdguard's marker is in {' and '.join(marked)} but not all of its fix: "
                "missing " + ", ".join(missing),
                marked[0],
            )
        return Outcome(Status.PRESENT, f"marker and deadline found in {PREFILL_PATH}")

    def _upstream(self, workspace: Workspace, tree: ast.Module) -> Outcome | None:
        """A deadline that the PDG001 model proves is already there (written by hand), judged
        as PDG001 judges it: with what its fail action does in this tree's sender classes."""
        if _function(tree, FUNCTION) is None:
            return None  # refused by the next step
        model = inflight_model(tree, workspace.run)
        valid = model.valid_checks(sender_index(workspace)) if model is not None else []
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
        helpers = {
            item.name: item
            for cls in tree.body
            if isinstance(cls, ast.ClassDef)
            for item in cls.body
            if isinstance(item, ast.FunctionDef)
        }
        branches = _failed_branches(function, helpers)
        if not branches:
            return Outcome(
                Status.REFUSED,
                f"{FUNCTION}() has no KVPoll.Failed branch to clean up a failed request",
                f"{PREFILL_PATH}:{function.lineno}",
            )
        for branch in branches:
            raising = next((s for s in branch if isinstance(s, ast.Raise)), None)
            if raising is not None:
                return Outcome(
                    Status.REFUSED,
                    "the KVPoll.Failed branch of "
                    f"{FUNCTION}() raises instead of aborting the request: a request failed "
                    "at the deadline would crash the scheduler",
                    f"{PREFILL_PATH}:{raising.lineno}",
                )
        return None

    def _senders(self, workspace: Workspace) -> tuple[str, Outcome | None]:
        """How the timeout becomes the room's failure reason: ``conclude`` where a sender
        class's manager has a ``conclude_failure()`` that marks the room Failed, which its
        concrete senders' ``poll()`` reports, and every other sender honours ``abort()``
        (0.5.20+, ``concluding_class``); ``record`` where every sender whose manager keeps
        records pops its record when it reports the failure (no record leaks), ``replace``
        (only the record ``abort()`` made) where some manager keeps records but not every
        sender pops them, else ``""``; or a refusal where some sender's
        ``poll()`` does not report Failed once aborted (the deadline fails senders with
        ``abort()`` only: ``sender-abort`` fixes their classes)."""
        index = sender_index(workspace)
        every = [s for s in index.senders() if index.is_concrete(s)]
        concluding = concluding_class(index, every)
        if concluding is not None:
            # 0.5.20+: conclude_failure() records the reason (the first root cause is kept),
            # marks the room Failed, which those senders' poll() reports, and tells decode
            self.concluding = concluding
            return _CONCLUDE, None
        left = workspace.left_out.get(SENDER_ABORT, frozenset())
        concrete = [s for s in every if s not in left]
        ignoring = [s for s in concrete if not index.abort_honoured(s)]
        if ignoring:
            # the file only: an earlier fix's pending change may have moved its lines
            owner = index.resolve(ignoring[0], "poll")
            where = owner.rel if owner else None
            return "", Outcome(
                Status.REFUSED,
                f"{', '.join(ignoring)}: poll() does not report Failed once abort() is called, "
                f"and the deadline fails overdue senders with abort(); the {SENDER_ABORT} fix "
                "changes those classes (apply it too, or leave a class out of both with "
                f"--ignore {SENDER_ABORT}:{ignoring[0]})",
                where,
            )
        keeping = [
            s
            for s in concrete
            if (manager := index.manager_of(s)) is None
            or index.manager_has(manager, MANAGER_RECORD_FAILURE)
        ]
        recorded = any(
            (manager := index.manager_of(s)) is not None
            and index.manager_has(manager, MANAGER_RECORD_FAILURE)
            for s in keeping
        )
        if not recorded:
            return "", None
        # every sender that may have a record pops it: a new one cannot leak
        if all(index.pops_failure_records(s) for s in keeping):
            return _RECORD, None
        return _REPLACE, None

    def _apply(self, workspace: Workspace) -> Outcome:
        """Run the codemods: on ``prefill.py``, and on ``environ.py`` where the release reads
        its timeouts from its env registry."""
        from pdguard.codemods.anchors import AnchorError
        from pdguard.codemods.inflight_deadline import InflightDeadline as Codemod
        from pdguard.codemods.inflight_timeout import InflightTimeoutEntry
        from pdguard.codemods.isort_imports import top_level_bindings

        module = workspace.module_statements(PREFILL_PATH)
        if KVPOLL not in top_level_bindings(module):
            return Outcome(
                Status.REFUSED, f"{KVPOLL} is not imported in {PREFILL_PATH}", PREFILL_PATH
            )
        reason, refused = self._senders(workspace)
        if refused is not None:
            return refused
        model = inflight_model(workspace.ast(PREFILL_PATH), workspace.run)
        if model is None:
            return Outcome(Status.REFUSED, f"no {FUNCTION}() in {PREFILL_PATH}", PREFILL_PATH)
        environ_tree = _environ(workspace)
        style = convention(environ_tree)
        codemod = Codemod(
            workspace.context(),
            convention=style,
            isort_config=workspace.isort_config(PREFILL_PATH),
            record=reason == _RECORD,
            replace=reason == _REPLACE,
            conclude=self.concluding if reason == _CONCLUDE else None,
            parked=bool(model.parked_line),
            pp=has_pp_prefill_loop(workspace),
        )
        prefill_before = workspace.text(PREFILL_PATH)
        try:
            workspace.transform(PREFILL_PATH, [codemod])
        except AnchorError as exc:
            return Outcome(Status.REFUSED, str(exc), PREFILL_PATH)
        if (
            style == fix_names.ENV_REGISTRY
            and registry_entry(environ_tree, INFLIGHT_TIMEOUT_ENV) is None
        ):  # the timeout's entry next to its siblings (one already there is used as it is)
            try:
                workspace.transform(ENVIRON_PATH, [InflightTimeoutEntry(workspace.context())])
            except AnchorError as exc:
                workspace.set_text(PREFILL_PATH, prefill_before)  # all of the fix or nothing
                return Outcome(Status.REFUSED, str(exc), ENVIRON_PATH)
        how = "abort() (every sender's poll() reports Failed once aborted), best effort"
        if reason == _CONCLUDE:
            how = (
                f"their manager's {MANAGER_CONCLUDE_FAILURE}() (it records the reason, keeping "
                "the first root cause, marks the room Failed and tells decode; senders that "
                f"are no {self.concluding.partition(':')[2]} are aborted), best effort"
            )
        elif reason == _RECORD:
            how += ", the timeout recorded as the room's failure"
        elif reason == _REPLACE:
            how += ", the timeout replacing the failure record abort() made (no new record)"
        read = (
            f"an env registry entry in {ENVIRON_PATH}"
            if style == fix_names.ENV_REGISTRY
            else "get_int_env_var"
        )
        if model.parked_line:
            how += "; parked requests are not counted while they bootstrap"
        return Outcome(
            Status.APPLIED,
            f"stamp at every inflight-queue entry, deadline before the poll all-reduce in "
            f"{FUNCTION}(); overdue senders are failed with {how}; {INFLIGHT_TIMEOUT_ENV} is "
            f"read at first use through {read}",
        )


def concluding_class(index: ClassIndex, concrete: list[str]) -> str | None:
    """``module:Class``: the sender class whose concrete subclasses (and itself) are failed by
    their manager's ``conclude_failure()`` (it marks the room Failed, which their ``poll()``
    reports: ``ClassIndex.abort_honoured``), covering the most of them, where every other
    concrete sender honours ``abort()``; None where the release has no such class (before
    0.5.20) or some sender is failed by neither."""
    passing = [s for s in concrete if index.abort_honoured(s, MANAGER_CONCLUDE_FAILURE)]
    best: tuple[int, str] | None = None
    for candidate in passing:
        covered = [s for s in concrete if candidate in {c.name for c in index.mro(s)}]
        if not all(s in passing for s in covered):
            continue
        if best is None or len(covered) > best[0]:
            best = (len(covered), candidate)
    if best is None:
        return None
    candidate = best[1]
    others = [s for s in concrete if candidate not in {c.name for c in index.mro(s)}]
    if not all(index.abort_honoured(s) for s in others):
        return None
    owner = index.resolve(candidate, "poll")
    info = next(c for c in index.mro(candidate) if c.name == candidate)
    if owner is None or not info.rel.endswith(".py"):
        return None
    module = info.rel.removesuffix(".py").replace("/", ".")
    return f"{module}:{candidate}"


# Where SGLang's PP prefill loops live: prefill.py (0.5.2 - 0.5.3), then the PP mixin (0.5.4+).
PP_LOOP_PATHS = (PREFILL_PATH, PP_MIXIN_PATH)
PP_LOOP = "event_loop_pp_disagg_prefill"
PP_LOOP_SINCE = (0, 5, 2)


def has_pp_prefill_loop(workspace: Workspace) -> bool:
    """Does a PP prefill loop pass the stages' consensus to the inflight function? Read from
    the loop's modules; a tree holding no scheduler (the disaggregation package alone) is told
    by its version (the loop arrived in 0.5.2), and taken to have one if it says none."""
    for rel in PP_LOOP_PATHS:
        data = workspace.tree.read_bytes(rel)
        if data is not None and PP_LOOP.encode() in data:
            return True
    if workspace.tree.read_bytes(SCHEDULER_PATH) is not None:
        return False
    version = workspace.tree.sglang_version()
    numbers = tuple(int(part) for part in re.findall(r"\d+", version or "")[:3])
    return not numbers or numbers >= PP_LOOP_SINCE


def _environ(workspace: Workspace) -> ast.Module | None:
    """The release's env registry module, if it has one."""
    if workspace.tree.read_bytes(ENVIRON_PATH) is None:
        return None
    return workspace.ast(ENVIRON_PATH)
