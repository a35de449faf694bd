"""PDG001: an inflight request can wait forever.

What it does
    In ``process_disagg_prefill_inflight_queue``, finds every place a request is kept for
    another step (appended to the list that becomes the inflight queue) and reports each one
    when no deadline bounds the wait.

Why is this bad
    Requests are kept on every non-terminal poll result: WaitingForInput, Transferring,
    Bootstrapping, unexpected states, the PP "not in consensus" branch, parked
    ``pending_bootstrap`` requests. If decode restarts, none of them ever turns terminal and the
    deployment wedges (``decode_running=0``). A deadline counts only when the request is stamped
    where it enters the queue and the deadline is enforced, before the poll all-reduce, on every
    call of the function (directly or in a method it calls), by failing the request's sender.

Example
    A release as shipped: nothing fails a request that waits too long. Each finding says which
    poll state or branch keeps the request ("when poll is WaitingForInput/Transferring", "when
    not in the PP consensus (rids_to_check)", "in the else branch (any other poll state)",
    "while parked pending_bootstrap, ...").

    ```python
    for req in batch.reqs:
        self.disagg_prefill_inflight_queue.append(req)
    ...
    for req, state in zip(self.disagg_prefill_inflight_queue, states):
        if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
            waiting.append(req)
    ```

Use instead
    Stamp the request where it enters the queue, and fail overdue senders before the poll
    all-reduce (``pdguard apply`` writes this as ``_fail_timed_out_inflight_reqs()``):

    ```python
    for req in batch.reqs:
        if getattr(req, "entered_at", None) is None:
            req.entered_at = time.monotonic()
        self.disagg_prefill_inflight_queue.append(req)


    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()


    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
        self._expire_inflight()
        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
    ```
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from pdguard.sglang_names import PP_CONSENSUS_PARAM

from ..models.bounded_wait import is_failed
from ..models.inflight import FUNCTION, QUEUE, InflightModel
from ..nodes import children, walk
from ..project import Project
from ..rule import PREFILL, Finding, Rule


class InflightWaitForever(Rule):
    code = "PDG001"
    name = "inflight-wait-forever"
    # The message of every INVALID example's finding starts with MESSAGE; the example tree's
    # one keep site is in the poll's `WaitingForInput/Transferring` branch (EXAMPLE_SITE).
    MESSAGE = "request kept in the inflight queue with no deadline"
    EXAMPLE_SITE = "when poll is WaitingForInput/Transferring"

    def check(self, project: Project) -> Iterator[Finding]:
        model = project.inflight
        if model is None:
            return
        valid = model.valid_checks(project.classes)
        stages = PP_CONSENSUS_PARAM in {a.arg for a in model.function.args.args}
        symbol = f"{model.class_name}.{FUNCTION}"
        parents = _parents(model.function)
        failed = [site for site in model.keep_sites if _kept_when_failed(site, parents)]
        for site in failed:
            yield self.finding(
                PREFILL,
                site.lineno,
                site.col_offset + 1,
                symbol,
                "request kept in the inflight queue when poll is Failed: it is polled Failed, "
                "and kept, on every step; no deadline ends it",
            )
        if valid and not (stages and all(c.skipped_under_pp for c in valid)):
            return
        why = _why(model) if not valid else _PP_SKIPPED
        for site in model.keep_sites:
            if site in failed:
                continue
            where = keep_site(site, parents)
            yield self.finding(
                PREFILL,
                site.lineno,
                site.col_offset + 1,
                symbol,
                f"{self.MESSAGE}{' ' + where if where else ''}: {why}",
            )


# -- which branch keeps the request -----------------------------------------------------------

_POLL_OPS = {ast.Eq: "is", ast.In: "is", ast.NotEq: "is not", ast.NotIn: "is not"}
_PP = "rids_to_check"
_PARKED = "pending_bootstrap"


def _parents(function: ast.FunctionDef) -> dict[int, ast.AST]:
    return {id(child): node for node in walk(function) for child in children(node)}


def _branches(site: ast.AST, parents: dict[int, ast.AST]) -> list[tuple[ast.If, bool]]:
    """The ``if`` statements around ``site``, innermost first: (the if, site in its body)."""
    found = []
    node = site
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, ast.If) and node is not parent.test:
            found.append((parent, node in parent.body))
        node = parent
    return found


def _kept_when_failed(site: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Is ``site`` in the body of the ``if`` that takes a poll of Failed (``state ==
    KVPoll.Failed``, ``state in (..., KVPoll.Failed)``)?"""
    branches = _branches(site, parents)
    if not branches or not branches[0][1]:
        return False
    test = branches[0][0].test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    right = test.comparators[0]
    items = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
    return isinstance(test.ops[0], ast.Eq | ast.In) and any(is_failed(i) for i in items)


def _states(node: ast.expr) -> list[str] | None:
    """``KVPoll.X`` (or a tuple/list/set of them) as ["X", ...]; None for anything else."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    names = [i.attr for i in items if isinstance(i, ast.Attribute) and i.attr[:1].isupper()]
    return names if names and len(names) == len(items) else None


def _mentions(node: ast.AST, name: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == name)
        or (isinstance(n, ast.Attribute) and n.attr == name)
        for n in walk(node)
    )


def _condition(test: ast.expr) -> str:
    """A test in words: a poll state, the PP consensus, parking, or the test's own text."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = type(test.ops[0]), test.comparators[0]
        states = _states(right)
        if op in _POLL_OPS and states:
            return f"when poll {_POLL_OPS[op]} {'/'.join(states)}"
        if _mentions(right, _PP) and op in (ast.In, ast.NotIn):
            return f"when {'not ' if op is ast.NotIn else ''}in the PP consensus ({_PP})"
    if _mentions(test, _PARKED) and isinstance(test, ast.Attribute | ast.Name):
        return f"while parked {_PARKED}"
    text = " ".join(ast.unparse(test).replace("KVPoll.", "").split())
    return f"when `{text if len(text) <= 60 else text[:57] + '...'}`"


def keep_site(site: ast.AST, parents: dict[int, ast.AST]) -> str:
    """Which poll state or branch keeps the request at ``site``, from the enclosing
    ``if``/``elif`` tests (innermost first, with the PP and parking context around it)."""
    branches = _branches(site, parents)
    if not branches:
        return ""
    inner, in_body = branches[0]
    if in_body:
        where = _condition(inner.test)
    else:
        polls = any(_states(c) for c in walk(inner.test) if isinstance(c, ast.expr))
        where = (
            "in the else branch (any other poll state)"
            if polls
            else (
                f"in the else branch of `{_condition(inner.test).removeprefix('when ').strip('`')}`"
            )
        )
    context: list[str] = []
    covered = {name for name in (_PARKED, _PP) if _mentions(inner.test, name)}
    for outer, body in branches[1:]:
        for name, words in ((_PARKED, f"while parked {_PARKED}"), (_PP, f"in the PP path ({_PP})")):
            if body and name not in covered and _mentions(outer.test, name):
                covered.add(name)
                context.append(words)
    return ", ".join([*reversed(context), where])


_PP_SKIPPED = (
    f"the deadline is skipped when {PP_CONSENSUS_PARAM} is given, and every PP stage gives it: "
    "under pipeline parallelism a transfer that never ends keeps its request on every stage"
)


def _why(model: InflightModel) -> str:
    if not model.checks:
        return "nothing fails a request that waits too long"
    stamped = model.stamped_attrs()
    if not stamped:
        return f"requests are not stamped where they enter {QUEUE}"
    if not any(c.attr in stamped for c in model.checks):
        # another attribute is stamped at entry (a metric): name the one the deadline reads
        measured = ", ".join(sorted({f"`{c.attr}`" for c in model.checks}))
        return f"the deadline measures {measured}, not stamped where requests enter {QUEUE}"
    if all(c.never for c in model.checks):
        return f"the deadline never fails an overdue request: {model.checks[0].never}"
    mixed = next(((c, k) for c in model.checks if (k := model.mixed_clock(c))), None)
    if mixed is not None and all(model.mixed_clock(c) for c in model.checks):
        return (
            f"the deadline reads now on {mixed[0].clock} against a {mixed[1]} stamp: the "
            "difference is no elapsed time, so it never fires"
        )
    if not any(c.each_step for c in model.checks):
        return "the deadline does not run before the poll all-reduce on every call"
    held = [c for c in model.checks if c.each_step and c.fails_sender]
    partial = next((c for c in held if c.partial), None)
    if partial is not None:
        return f"the deadline skips requests of the queue: it loops over {partial.reaches}"
    gated = next((c for c in held if c.rank_gate), None)
    if gated is not None:
        return (
            f"the deadline fails the request's sender only on the ranks where `{gated.rank_gate}`"
        )
    if any(c.reaches for c in held):
        return "pdguard cannot tell that the deadline looks at every request (PDG000)"
    live = [c for c in held if not c.never]
    if held and not live:
        return f"the deadline never fails an overdue request: {held[0].never}"
    return "the deadline does not fail the request's sender"
