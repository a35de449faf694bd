"""Mutants of a patched SGLang tree, each breaking one property ``pdguard check`` must prove, and
hand-made correct variants in another style that it must accept.

One generator serves the check mutation suite (``python -m tests.mutants``,
tests/commands/test_check_releases.py: every mutant must be reported with its code) and the
simulator (tests/simulate/test_prefill.py: some mutants must fail given scenarios). Every edit
finds its place with ``ast`` (pdguard's stamp, its deadline call, the poll all-reduce, the
sender's lines), not with text patterns, and then splices whole lines, so the rest of the file
keeps its bytes.

Everything works on texts in memory (relative path -> source), as ``checks.Project`` takes them;
``mutate_tree`` applies a mutant to a tree on disk.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pdguard.checks.models.inflight import analyse
from pdguard.checks.project import PREFILL
from pdguard.fix_names import (
    DECODE_GATE_FLAG,
    DECODE_POLL_PENDING,
    DECODE_QUEUE_BOUND,
    RECEIVER_WAITING_TIMEOUT,
    marker,
)
from pdguard.sglang_names import DECODE_PATH

NIXL = "sglang/srt/disaggregation/nixl/conn.py"
MOONCAKE = "sglang/srt/disaggregation/mooncake/conn.py"
STAMP_ATTR = "inflight_queue_entry_time"
DEADLINE_HELPER = "_fail_timed_out_inflight_reqs"
INFLIGHT_FUNCTION = "process_disagg_prefill_inflight_queue"
INFLIGHT_MARKER = "# pdguard: inflight-deadline"
SENDER_MARKER = "# pdguard: sender-bootstrap-timeout"
ABORT_MARKER = "# pdguard: sender-abort"

Texts = dict[str, str]


@dataclass(frozen=True)
class Mutant:
    name: str
    expected: str  # the code that must be among the findings
    mutate: Callable[[Texts], Texts | None]  # None: not applicable here
    # a decode mutant generated wherever the fix wrote into this file (with its marker)
    always_in: str | None = None


# -- the generator: ast finds the place, whole lines are spliced ----------------------------


class _Source:
    """One module's text as lines (``\\n`` kept, as ``ast`` numbers them), its ``ast``, and
    pending line edits, applied bottom-up by ``text()``."""

    def __init__(self, text: str) -> None:
        self.lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
        self.tree = ast.parse(text)
        self._edits: list[tuple[int, int, list[str]]] = []

    def nodes(self, kind: type[ast.AST] | tuple[type[ast.AST], ...]) -> list:
        """Every node of ``kind``, in the order of the text."""
        found = [n for n in ast.walk(self.tree) if isinstance(n, kind)]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))

    def indent(self, node: ast.stmt) -> str:
        return " " * node.col_offset

    def marked_start(self, node: ast.stmt, marker: str) -> int:
        """The 1-based first line of ``node`` with pdguard's comment block above it: the comment
        lines right above, from the one holding ``marker`` (``node.lineno`` when there is none)."""
        start = node.lineno
        line = node.lineno - 1
        while line >= 1 and self.lines[line - 1].lstrip().startswith("#"):
            if marker in self.lines[line - 1]:
                start = line
            line -= 1
        return start

    def replace(self, first: int, last: int, new: list[str]) -> None:
        """Replace lines ``first`` .. ``last`` (1-based, inclusive) with ``new``."""
        self._edits.append((first, last, new))

    def insert(self, before: int, new: list[str]) -> None:
        self._edits.append((before, before - 1, new))

    def remove(self, node: ast.stmt, marker: str | None = None) -> None:
        first = node.lineno if marker is None else self.marked_start(node, marker)
        self.replace(first, _end(node), [])

    def text(self) -> str:
        lines = list(self.lines)
        for first, last, new in sorted(self._edits, key=lambda e: e[0], reverse=True):
            lines[first - 1 : last] = new
        return "".join(lines)


def _end(node: ast.stmt) -> int:
    assert node.end_lineno is not None
    return node.end_lineno


def _edit(texts: Texts, rel: str, change: Callable[[_Source], bool]) -> Texts | None:
    """``texts`` with ``rel`` changed by ``change`` (which says whether it found its place),
    or None when the mutation does not apply."""
    if rel not in texts:
        return None
    source = _Source(texts[rel])
    if not change(source):
        return None
    new = source.text()
    return None if new == texts[rel] else {**texts, rel: new}


def _self_attr(node: ast.expr, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _stamps(source: _Source) -> list[ast.Assign]:
    """pdguard's stamps where requests enter the queue: ``req.inflight_queue_entry_time =
    <clock>()``, at every entry (outside the inflight function and the deadline helper)."""
    skip = [*_function(source, INFLIGHT_FUNCTION), *_function(source, DEADLINE_HELPER)]
    return [
        node
        for node in source.nodes(ast.Assign)
        if len(node.targets) == 1
        and isinstance(node.targets[0], ast.Attribute)
        and node.targets[0].attr == STAMP_ATTR
        and isinstance(node.value, ast.Call)
        and not any(_inside(node, f) for f in skip)
    ]


def _stamp_statement(source: _Source, stamp: ast.Assign) -> ast.stmt:
    """The statement that is the stamp: the assignment, or the loop that holds only it (a
    stamped batch)."""
    for loop in source.nodes(ast.For):
        if loop.body == [stamp] or (len(loop.body) == 1 and loop.body[0] is stamp):
            return loop
    return stamp


def _stamped_name(stamp: ast.Assign) -> str:
    return ast.unparse(stamp.targets[0].value)  # type: ignore[attr-defined]  # the stamp's target is an Attribute (see _stamps)


def _deadline_calls(source: _Source) -> list[ast.Expr]:
    """``self._fail_timed_out_inflight_reqs(...)``, as pdguard calls it."""
    return [
        node
        for node in source.nodes(ast.Expr)
        if isinstance(node.value, ast.Call) and _self_attr(node.value.func, DEADLINE_HELPER)
    ]


def _function(source: _Source, name: str) -> Iterator[ast.FunctionDef]:
    for node in source.nodes(ast.FunctionDef):
        if node.name == name:
            yield node


def _inside(node: ast.stmt, outer: ast.stmt) -> bool:
    return outer.lineno <= node.lineno and _end(node) <= _end(outer)


def _poll_all_reduce_after(source: _Source, call: ast.stmt) -> ast.Assign | None:
    """The first ``polls = poll_and_all_reduce*(...)`` after ``call`` in its function."""
    function = next(f for f in _function(source, INFLIGHT_FUNCTION) if _inside(call, f))
    return next(
        (
            node
            for node in source.nodes(ast.Assign)
            if _inside(node, function)
            and node.lineno > call.lineno
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id.startswith("poll_and_all_reduce")
        ),
        None,
    )


# -- the mutants -------------------------------------------------------------------------------


def _remove_stamp(texts: Texts) -> Texts | None:
    def change(source: _Source) -> bool:
        stamps = _stamps(source)
        if stamps:
            source.remove(_stamp_statement(source, stamps[0]), INFLIGHT_MARKER)
        return bool(stamps)

    return _edit(texts, PREFILL, change)


def _stamp_at_sender_creation(texts: Texts) -> Texts | None:
    """The stamp at the inflight-queue append removed; the request stamped instead where the
    bootstrap queue creates its sender (before the prefill)."""

    def change(source: _Source) -> bool:
        stamps = _stamps(source)
        creation = next(
            (
                node
                for node in source.nodes(ast.Assign)
                if len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute)
                and node.targets[0].attr == "disagg_kv_sender"
                and isinstance(node.targets[0].value, ast.Name)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
            ),
            None,
        )
        if not stamps or creation is None:
            return False
        source.remove(_stamp_statement(source, stamps[0]), INFLIGHT_MARKER)
        req = creation.targets[0].value.id
        stamp = f"{source.indent(creation)}{req}.{STAMP_ATTR} = time.monotonic()\n"
        source.insert(creation.lineno, [stamp])
        return True

    return _edit(texts, PREFILL, change)


def restamp_on_keep(texts: Texts) -> Texts | None:
    """The stamp written again where the inflight function keeps a waiting request for another
    step: the clock restarts on every poll."""

    def change(source: _Source) -> bool:
        model = analyse(source.tree)
        if model is None or not model.keep_sites:
            return False
        keep = model.keep_sites[0]
        kept = keep.args[0] if keep.args else None
        if not isinstance(kept, ast.Name):
            return False
        restamp = f"{' ' * keep.col_offset}{kept.id}.{STAMP_ATTR} = time.monotonic()\n"
        source.insert(keep.lineno, [restamp])
        return True

    return _edit(texts, PREFILL, change)


def first_stamp_kept_across_requeue(texts: Texts) -> Texts | None:
    """Every stamp kept from the request's first entry (``if getattr(req, ..., None) is
    None:``) in a release with a path that takes requests out of the queue and back (optimistic
    prefill, 0.5.13+): a requeued request carries its old stamp. Not generated elsewhere."""

    def change(source: _Source) -> bool:
        model = analyse(source.tree)
        if model is None or not model.send_backs:
            return False
        stamps = _stamps(source)
        for stamp in stamps:
            i = source.indent(stamp)
            name = _stamped_name(stamp)
            body = "".join(source.lines[stamp.lineno - 1 : _end(stamp)]).lstrip()
            source.replace(
                stamp.lineno,
                _end(stamp),
                [f"{i}if getattr({name}, '{STAMP_ATTR}', None) is None:\n", f"{i}    {body}"],
            )
        return bool(stamps)

    return _edit(texts, PREFILL, change)


def _deadline_after_reduce(texts: Texts) -> Texts | None:
    """``self._fail_timed_out_inflight_reqs()`` moved to right after the poll all-reduce."""

    def change(source: _Source) -> bool:
        calls = _deadline_calls(source)
        polls = _poll_all_reduce_after(source, calls[0]) if calls else None
        if polls is None:
            return False
        source.remove(calls[0], INFLIGHT_MARKER)
        call = ast.unparse(calls[0])  # with its arguments (PP: rids_to_check)
        source.insert(_end(polls) + 1, [f"{source.indent(calls[0])}{call}\n"])
        return True

    return _edit(texts, PREFILL, change)


def _helper_not_called(texts: Texts) -> Texts | None:
    def change(source: _Source) -> bool:
        calls = _deadline_calls(source)
        if calls:
            source.remove(calls[0], INFLIGHT_MARKER)
        return bool(calls)

    return _edit(texts, PREFILL, change)


def _deadline_drops_locally(texts: Texts) -> Texts | None:
    """The deadline helper drops the overdue request from this rank's queue instead of failing
    its sender (no abort, no pinned poll): a per-rank decision."""

    def change(source: _Source) -> bool:
        helper = next(_function(source, DEADLINE_HELPER), None)
        if helper is None:
            return False
        loop = next(n for n in source.nodes(ast.For) if _inside(n, helper))
        sender = next(
            (
                i
                for i, stmt in enumerate(loop.body)
                if isinstance(stmt, ast.Assign)
                and any(
                    isinstance(n, ast.Attribute) and n.attr == "disagg_kv_sender"
                    for n in ast.walk(stmt.value)
                )
            ),
            None,
        )
        if sender is None:
            return False
        first = loop.body[sender]
        indent = source.indent(first)
        target = ast.unparse(loop.target)
        drop = [
            f"{indent}self.disagg_prefill_inflight_queue.remove({target})\n",
            f"{indent}break\n",
        ]
        source.replace(first.lineno, _end(loop.body[-1]), drop)
        return True

    return _edit(texts, PREFILL, change)


def _pinned_polls(source: _Source, helper: ast.FunctionDef) -> list[ast.Assign]:
    """``sender.poll = lambda: KVPoll.Failed`` in the deadline helper."""
    return [
        node
        for node in source.nodes(ast.Assign)
        if _inside(node, helper)
        and isinstance(node.targets[0], ast.Attribute)
        and node.targets[0].attr == "poll"
    ]


def poll_set_on_instance(texts: Texts) -> Texts | None:
    """The deadline helper's best-effort ``abort()`` replaced by a poll set on the sender
    instance (what pdguard wrote before issue 10)."""

    def change(source: _Source) -> bool:
        helper = next(_function(source, DEADLINE_HELPER), None)
        if helper is None or _pinned_polls(source, helper):
            return False
        attempt = next((n for n in source.nodes(ast.Try) if _inside(n, helper)), None)
        if attempt is None:
            return False
        pin = f"{source.indent(attempt)}sender.poll = lambda: KVPoll.Failed\n"
        source.replace(attempt.lineno, _end(attempt), [pin])
        return True

    return _edit(texts, PREFILL, change)


def abort_check_removed(texts: Texts) -> Texts | None:
    """Where pdguard made NIXL's ``poll()`` return its concluded state first (sender-abort, up
    to 0.5.11), that check removed: ``abort()`` no longer fails NIXL's requests."""

    def change(source: _Source) -> bool:
        for node in source.nodes(ast.If):
            above = source.lines[max(node.lineno - 3, 0) : node.lineno - 1]  # its comment
            if any(ABORT_MARKER in line for line in above) and any(
                _self_attr(n, "conclude_state") for n in ast.walk(node.test)
            ):
                source.remove(node, ABORT_MARKER)
                return True
        return False

    return _edit(texts, NIXL, change)


def _parked_skip(source: _Source) -> ast.If | None:
    """The deadline helper's skip of parked requests (an ``if`` testing ``pending_bootstrap``)."""
    helper = next(_function(source, DEADLINE_HELPER), None)
    return next(
        (
            n
            for n in source.nodes(ast.If)
            if helper is not None and _inside(n, helper) and "pending_bootstrap" in _attrs(n.test)
        ),
        None,
    )


def _attrs(node: ast.AST) -> set[str]:
    return {a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)}


def counts_parked_time(texts: Texts) -> Texts | None:
    """Where the queue holds parked requests (0.5.16+), the deadline helper's skip of them
    removed: their wait for bootstrap counts against the inflight deadline."""

    def change(source: _Source) -> bool:
        skip = _parked_skip(source)
        if skip is None:
            return False
        source.remove(skip)
        return True

    return _edit(texts, PREFILL, change)


def skips_every_parked(texts: Texts) -> Texts | None:
    """Where the queue holds parked requests (0.5.16+), the deadline helper skips every parked
    request, not only those whose sender still bootstraps: under PP a bootstrapped one is
    never unparked and never failed."""

    def change(source: _Source) -> bool:
        skip = _parked_skip(source)
        if skip is None or "Bootstrapping" not in _attrs(skip.test):
            return False
        test = f"{source.indent(skip)}if req.pending_bootstrap:\n"
        source.replace(skip.lineno, skip.body[0].lineno - 1, [test])
        return True

    return _edit(texts, PREFILL, change)


def ignores_stage_poll(texts: Texts) -> Texts | None:
    """Under PP (the inflight function takes ``rids_to_check``), the deadline helper's skip of
    a request this stage already polls as transferred removed: only the consensus that has
    reached the stage spares a request, so a stage can abort one it polled Success for while
    the consensus is still on its way to it."""

    def change(source: _Source) -> bool:
        helper = next(_function(source, DEADLINE_HELPER), None)
        # only where the helper takes the stages' consensus (a PP prefill loop passes it)
        if helper is None or "rids_to_check" not in {a.arg for a in helper.args.args}:
            return False
        loop = next(n for n in source.nodes(ast.For) if _inside(n, helper))
        skips = [
            stmt
            for stmt in loop.body
            if isinstance(stmt, ast.If)
            and any(
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "poll"
                for n in ast.walk(stmt)
            )
        ]
        for skip in skips:
            source.remove(skip)
        return bool(skips)

    return _edit(texts, PREFILL, change)


# -- hostile mutants (issue 20): code that reads like a deadline but bounds nothing --------------


def _helper_body(source: _Source) -> list[ast.stmt] | None:
    """The deadline helper's statements after its docstring."""
    helper = next(_function(source, DEADLINE_HELPER), None)
    if helper is None:
        return None
    body = helper.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body or None


def _helper_returns_first(texts: Texts) -> Texts | None:
    """A ``return`` before everything the deadline helper does."""

    def change(source: _Source) -> bool:
        body = _helper_body(source)
        if body is None:
            return False
        source.insert(body[0].lineno, [f"{source.indent(body[0])}return\n"])
        return True

    return _edit(texts, PREFILL, change)


def _deadline_comparison_flipped(texts: Texts) -> Texts | None:
    """``now - entry_time < timeout`` (skip the requests with time left) turned into ``>``:
    the requests that are overdue are skipped, those with time left aborted."""

    def change(source: _Source) -> bool:
        helper = next(_function(source, DEADLINE_HELPER), None)
        compare = next(
            (
                n
                for n in source.nodes(ast.Compare)
                if helper is not None
                and _inside(n, helper)  # type: ignore[arg-type]  # a Compare has line numbers
                and isinstance(n.ops[0], ast.Lt)
                and isinstance(n.left, ast.BinOp)
            ),
            None,
        )
        if compare is None:
            return False
        line = source.lines[compare.lineno - 1]
        flipped = line.replace(" < ", " > ", 1)
        source.replace(compare.lineno, compare.lineno, [flipped])
        return flipped != line

    return _edit(texts, PREFILL, change)


def _timeout_forced_to_inf(texts: Texts) -> Texts | None:
    """The helper's timeout rebound to infinity right after it is read."""

    def change(source: _Source) -> bool:
        body = _helper_body(source)
        read = next(
            (
                s
                for s in body or ()
                if isinstance(s, ast.Assign)
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and isinstance(s.value, ast.Call)
            ),
            None,
        )
        if read is None:
            return False
        name = ast.unparse(read.targets[0])
        source.insert(_end(read) + 1, [f'{source.indent(read)}{name} = float("inf")\n'])
        return True

    return _edit(texts, PREFILL, change)


def _stamp_cleared_on_keep(texts: Texts) -> Texts | None:
    """The stamp set to None where the inflight function keeps a request for another step."""

    def change(source: _Source) -> bool:
        function = next(_function(source, INFLIGHT_FUNCTION), None)
        keep = next(
            (
                n
                for n in source.nodes(ast.Expr)
                if function is not None
                and _inside(n, function)
                and isinstance(n.value, ast.Call)
                and isinstance(n.value.func, ast.Attribute)
                and n.value.func.attr == "append"
                and isinstance(n.value.func.value, ast.Name)
                and n.value.args
                and isinstance(n.value.args[0], ast.Name)
                and n.value.func.value.id.startswith("undone")
            ),
            None,
        )
        if keep is None:
            return False
        call = keep.value
        assert isinstance(call, ast.Call)
        request = ast.unparse(call.args[0])
        source.insert(keep.lineno, [f"{source.indent(keep)}{request}.{STAMP_ATTR} = None\n"])
        return True

    return _edit(texts, PREFILL, change)


def _stamp_on_wall_clock(texts: Texts) -> Texts | None:
    """Every entry stamp taken with ``time.time()``, while the deadline reads
    ``time.monotonic()``: the difference is no elapsed time."""

    def change(source: _Source) -> bool:
        stamps = _stamps(source)
        for stamp in stamps:
            line = source.lines[stamp.lineno - 1]
            source.replace(stamp.lineno, stamp.lineno, [line.replace("monotonic()", "time()")])
        return bool(stamps)

    return _edit(texts, PREFILL, change)


def _entry_through_getattr(texts: Texts) -> Texts | None:
    """The first entry outside the inflight function made through ``getattr(self, "<queue>")``:
    a way in the model does not follow (PDG000, never a clean check)."""

    def change(source: _Source) -> bool:
        skip = [*_function(source, INFLIGHT_FUNCTION), *_function(source, DEADLINE_HELPER)]
        queue = "self.disagg_prefill_inflight_queue."
        for node in source.nodes(ast.Expr):
            line = source.lines[node.lineno - 1]
            if queue in line and not any(_inside(node, f) for f in skip):
                getter = 'getattr(self, "disagg_prefill_inflight_queue").'
                source.replace(node.lineno, node.lineno, [line.replace(queue, getter, 1)])
                return True
        return False

    return _edit(texts, PREFILL, change)


def _helper_decorated(texts: Texts) -> Texts | None:
    """The deadline helper replaced by a decorator defined at the end of the module."""

    def change(source: _Source) -> bool:
        helper = next(_function(source, DEADLINE_HELPER), None)
        if helper is None:
            return False
        source.insert(helper.lineno, [f"{source.indent(helper)}@_replaced\n"])
        source.insert(
            len(source.lines) + 1,
            ["\n\ndef _replaced(function):\n", "    return lambda self, *args, **kwargs: None\n"],
        )
        return True

    return _edit(texts, PREFILL, change)


def _remove_import(module: str) -> Callable[[Texts], Texts | None]:
    def mutate(texts: Texts) -> Texts | None:
        def change(source: _Source) -> bool:
            imports = [
                node
                for node in source.tree.body
                if isinstance(node, ast.Import)
                and [(a.name, a.asname) for a in node.names] == [(module, None)]
            ]
            if imports:
                source.remove(imports[0])
            return bool(imports)

        return _edit(texts, PREFILL, change)

    return mutate


def _remove_init_time(texts: Texts) -> Texts | None:
    """pdguard's ``self.init_time = time.time()`` in the sender's ``__init__``, removed."""

    def change(source: _Source) -> bool:
        marker = f"{SENDER_MARKER}: the bootstrap timeout"
        for node in source.nodes(ast.Assign):
            marked = source.marked_start(node, marker) < node.lineno
            if _self_attr(node.targets[0], "init_time") and marked:
                source.remove(node, marker)
                return True
        return False

    return _edit(texts, NIXL, change)


def _remove_bootstrap_check(texts: Texts) -> Texts | None:
    """pdguard's bootstrap-timeout check in the sender's ``poll()``, removed."""

    def change(source: _Source) -> bool:
        for node in source.nodes(ast.If):
            if source.lines[node.lineno - 2].strip() == SENDER_MARKER:
                source.remove(node, SENDER_MARKER)
                return True
        return False

    return _edit(texts, NIXL, change)


# -- the decode fixes: receiver-waiting-timeout (PDG006), decode-queue-bound (PDG007) ---------

RECEIVER_MARKER = marker(RECEIVER_WAITING_TIMEOUT)
DECODE_MARKER = marker(DECODE_QUEUE_BOUND)
RECEIVER_FILES = {"mooncake": MOONCAKE, "nixl": NIXL}


def _marked(source: _Source, node: ast.stmt, marker_text: str) -> bool:
    """pdguard's comment (``marker_text``, any tail) sits right above ``node``."""
    return source.marked_start(node, marker_text) < node.lineno


def _receiver_stamps(source: _Source, value: type[ast.AST]) -> list[ast.Assign]:
    """pdguard's ``self.init_time = ...`` whose value is a ``value`` node (``ast.Constant``:
    the constructor's None; ``ast.Call``: the clock where the indices are sent)."""
    return [
        node
        for node in source.nodes(ast.Assign)
        if len(node.targets) == 1
        and _self_attr(node.targets[0], "init_time")
        and isinstance(node.value, value)
        and _marked(source, node, RECEIVER_MARKER)
    ]


def _receiver_checks(source: _Source) -> list[ast.If]:
    """pdguard's waiting-timeout check in a receiver's ``poll()``: the ``if`` right under the
    bare marker line."""
    return [
        node
        for node in source.nodes(ast.If)
        if source.lines[node.lineno - 2].strip() == RECEIVER_MARKER
    ]


def _expired_branch(check: ast.If) -> ast.If | None:
    """The ``if <elapsed> >= <limit>:`` inside pdguard's check."""
    return next(
        (n for n in ast.walk(check) if isinstance(n, ast.If) and n is not check),
        None,
    )


def _on_receiver(
    backend: str, change: Callable[[_Source], bool]
) -> Callable[[Texts], Texts | None]:
    def mutate(texts: Texts) -> Texts | None:
        return _edit(texts, RECEIVER_FILES[backend], change)

    return mutate


def _receiver_never_stamped(source: _Source) -> bool:
    """The stamp where the indices are sent removed: ``init_time`` stays None."""
    stamps = _receiver_stamps(source, ast.Call)
    for stamp in stamps:
        source.remove(stamp, RECEIVER_MARKER)
    return bool(stamps)


def _receiver_stamped_at_construction(source: _Source) -> bool:
    """The clock started in the constructor instead of where the indices are sent (as
    sgl-project/sglang#21477 proposed): it also counts the wait for decode memory."""
    sent, built = _receiver_stamps(source, ast.Call), _receiver_stamps(source, ast.Constant)
    if not sent or not built:
        return False
    clock = ast.unparse(sent[0].value)
    for stamp in sent:
        source.remove(stamp, RECEIVER_MARKER)
    for stamp in built:
        source.replace(
            stamp.lineno, _end(stamp), [f"{source.indent(stamp)}self.init_time = {clock}\n"]
        )
    return True


def _receiver_check_removed(source: _Source) -> bool:
    checks = _receiver_checks(source)
    for check in checks:
        source.remove(check, RECEIVER_MARKER)
    return bool(checks)


def _receiver_wrong_clock(source: _Source) -> bool:
    """The elapsed time read on another clock than the stamp's (``time.monotonic()`` against
    a ``time.time()`` stamp): the difference never reaches the limit."""
    done = False
    for check in _receiver_checks(source):
        for node in ast.walk(check):
            if not (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Sub)
                and isinstance(node.left, ast.Call)
                and isinstance(node.left.func, ast.Attribute)
            ):
                continue
            func = node.left.func
            other = "monotonic" if func.attr != "monotonic" else "time"
            line = source.lines[node.lineno - 1]
            old = ast.unparse(node.left)
            new = f"{ast.unparse(func.value)}.{other}()"
            source.replace(node.lineno, node.lineno, [line.replace(old, new, 1)])
            done = True
    return done


def _manager_keeps_failed(source: _Source) -> bool:
    """The module's ``update_status`` writes Failed over a tracked room's status (Mooncake
    0.4.7+), instead of keeping the larger status (``max``; Failed is the smallest)."""
    for func in _function(source, "update_status"):
        if any(isinstance(n, ast.Attribute) and n.attr == "Failed" for n in ast.walk(func)):
            return True
    return False


def _receiver_failure_not_kept(source: _Source) -> bool:
    """The expired side stores Failed through the manager's ``update_status`` and goes on,
    instead of returning Failed (and remembering it on the receiver): where the manager
    only ever raises a room's status (``max``), Failed is never recorded."""
    if _manager_keeps_failed(source):
        return False  # the next poll reads Failed back: the same fix, one poll later
    done = False
    for check in _receiver_checks(source):
        expired = _expired_branch(check)
        if expired is None:
            continue
        kept = [
            s
            for s in expired.body
            if isinstance(s, ast.Return)
            or (isinstance(s, ast.Assign) and _self_attr(s.targets[0], "conclude_state"))
        ]
        if not kept:
            continue
        for stmt in kept:
            source.replace(stmt.lineno, _end(stmt), [])
        i = source.indent(expired.body[0])
        update = f"{i}self.kv_mgr.update_status(self.bootstrap_room, KVPoll.Failed)\n"
        source.insert(_end(expired.body[-1]) + 1, [update])
        done = True
    return done


def _heartbeat_fails_started_rooms_only(source: _Source) -> bool:
    """NIXL 0.5.3 - 0.5.5.post3: the node-failure handler again fails only rooms that already
    got a chunk (``room in self.transfer_statuses``), as before 0.5.6."""
    for node in source.nodes(ast.If):
        if _marked(source, node, RECEIVER_MARKER) and any(
            isinstance(n, ast.Attribute) and n.attr == "transfer_statuses"
            for n in ast.walk(node.test)
        ):
            room = next(n.id for n in ast.walk(node.test) if isinstance(n, ast.Name))
            line = source.lines[node.lineno - 1]
            test = ast.unparse(node.test)
            new = line.replace(f"if {test}:", f"if {room} in self.transfer_statuses and {test}:", 1)
            if new == line:
                return False
            source.replace(node.lineno, node.lineno, [new])
            return True
    return False


def _pending_bound(source: _Source) -> tuple[list[ast.stmt], ast.If] | None:
    """pdguard's bound on the pending re-queue: the statements from its marker down to the
    ``if <waited> > <limit>: ... else: <list>.append(<req>)``."""
    for node in source.nodes(ast.If):
        if not (
            len(node.orelse) == 1
            and isinstance(node.orelse[0], ast.Expr)
            and isinstance(node.orelse[0].value, ast.Call)
            and isinstance(node.orelse[0].value.func, ast.Attribute)
            and node.orelse[0].value.func.attr == "append"
        ):
            continue
        for parent in ast.walk(source.tree):
            for body in (getattr(parent, "body", None), getattr(parent, "orelse", None)):
                if not isinstance(body, list) or node not in body:
                    continue
                end = body.index(node)
                start = next(
                    (i for i in range(end, -1, -1) if _marked(source, body[i], DECODE_MARKER)),
                    None,
                )
                if start is not None:
                    return body[start : end + 1], node
    return None


def _pending_bound_removed(texts: Texts) -> Texts | None:
    def change(source: _Source) -> bool:
        found = _pending_bound(source)
        if found is None:
            return False
        block, bound = found
        requeue = source.lines[bound.orelse[0].lineno - 1].lstrip()
        first = source.marked_start(block[0], DECODE_MARKER)
        source.replace(first, _end(bound), [f"{source.indent(block[0])}{requeue}"])
        return True

    return _edit(texts, DECODE_PATH, change)


def _pending_stamp_every_step(texts: Texts) -> Texts | None:
    """The first-time guard around the pending stamp dropped: the request is stamped again
    every time it is put back, so it never waits longer than one step."""

    def change(source: _Source) -> bool:
        found = _pending_bound(source)
        if found is None:
            return False
        guard = next((s for s in found[0] if isinstance(s, ast.If) and s is not found[1]), None)
        if guard is None or len(guard.body) != 1:
            return False
        stamp = guard.body[0]
        body = "".join(source.lines[stamp.lineno - 1 : _end(stamp)])
        source.replace(guard.lineno, _end(guard), [source.indent(guard) + body.lstrip()])
        return True

    return _edit(texts, DECODE_PATH, change)


def _pending_counter_not_incremented(texts: Texts) -> Texts | None:
    """The bound written as a retry count that is read and compared but never incremented."""

    def change(source: _Source) -> bool:
        found = _pending_bound(source)
        if found is None:
            return False
        block, bound = found
        append = bound.orelse[0].value
        assert isinstance(append, ast.Call) and isinstance(append.func, ast.Attribute)
        item, local = ast.unparse(append.args[0]), ast.unparse(append.func.value)
        i = source.indent(block[0])
        counted = [
            f'{i}tries = getattr({item}, "pending_tries", 0)\n',
            f"{i}if tries >= 15:\n",
            f"{i}    {item}.kv_receiver.abort()\n",
            f"{i}else:\n",
            f"{i}    {local}.append({item})\n",
        ]
        source.replace(source.marked_start(block[0], DECODE_MARKER), _end(bound), counted)
        return True

    return _edit(texts, DECODE_PATH, change)


def _gate_still_returns(texts: Texts) -> Texts | None:
    """pdguard's flag set, but the early return kept after it: neither queue is polled while
    retracted requests wait."""

    def change(source: _Source) -> bool:
        for node in source.nodes(ast.Assign):
            if (
                len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == DECODE_GATE_FLAG
            ):
                i = source.indent(node)
                source.insert(_end(node) + 1, [f"{i}if {DECODE_GATE_FLAG}:\n", f"{i}    return\n"])
                return True
        return False

    return _edit(texts, DECODE_PATH, change)


def _poll_pending_removed(texts: Texts) -> Texts | None:
    """pdguard's ``poll_pending_reqs()`` call taken out of ``process_decode_queue`` (the
    previous version's patch): the pending bound runs only in ``pop_preallocated()``, behind
    the retraction gate (seed 41)."""

    def change(source: _Source) -> bool:
        for node in source.nodes(ast.Expr):
            call = node.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == DECODE_POLL_PENDING
            ):
                source.remove(node, DECODE_MARKER)
                return True
        return False

    return _edit(texts, DECODE_PATH, change)


def _receiver_mutants() -> list[Mutant]:
    found = []
    for what, change, always in (
        ("init_time never set", _receiver_never_stamped, True),
        ("clock started at construction", _receiver_stamped_at_construction, True),
        ("waiting-timeout check removed", _receiver_check_removed, True),
        ("elapsed read on another clock", _receiver_wrong_clock, True),
        ("timeout stored through update_status only", _receiver_failure_not_kept, False),
    ):
        for backend, rel in RECEIVER_FILES.items():
            found.append(
                Mutant(
                    f"receiver {what} ({backend})",
                    "PDG006",
                    _on_receiver(backend, change),
                    rel if always else None,
                )
            )
    found.append(
        Mutant(
            "heartbeat fails only rooms that got a chunk (nixl)",
            "PDG006",
            _on_receiver("nixl", _heartbeat_fails_started_rooms_only),
        )
    )
    return found


DECODE_MUTANTS = (
    *_receiver_mutants(),
    Mutant("pending bound removed", "PDG007", _pending_bound_removed),
    Mutant("pending stamp rewritten every step", "PDG007", _pending_stamp_every_step),
    Mutant("pending counter never incremented", "PDG007", _pending_counter_not_incremented),
    Mutant("retraction gate still returns", "PDG007", _gate_still_returns, DECODE_PATH),
    Mutant("pending bound only behind the gate", "PDG007", _poll_pending_removed),
)


MUTANTS = (
    Mutant("stamp removed", "PDG001", _remove_stamp),
    Mutant("stamp moved to sender creation", "PDG003", _stamp_at_sender_creation),
    Mutant("deadline counts parked time", "PDG003", counts_parked_time),
    Mutant("deadline skips every parked request", "PDG003", skips_every_parked),
    Mutant("stamp rewritten on keep", "PDG003", restamp_on_keep),
    Mutant("first stamp kept across a requeue", "PDG003", first_stamp_kept_across_requeue),
    Mutant("deadline moved after the all-reduce", "PDG002", _deadline_after_reduce),
    Mutant("deadline helper defined but not called", "PDG001", _helper_not_called),
    Mutant("deadline drops the request locally", "PDG002", _deadline_drops_locally),
    Mutant("poll set on a sender instance", "PDG002", poll_set_on_instance),
    Mutant("deadline ignores the PP stage's own poll", "PDG002", ignores_stage_poll),
    Mutant("poll() ignores abort() again", "PDG008", abort_check_removed),
    Mutant("init_time removed", "PDG004", _remove_init_time),
    Mutant("bootstrap check removed", "PDG004", _remove_bootstrap_check),
    Mutant("deadline helper returns first", "PDG001", _helper_returns_first),
    Mutant("deadline comparison flipped", "PDG001", _deadline_comparison_flipped),
    Mutant("timeout forced to infinity", "PDG001", _timeout_forced_to_inf),
    Mutant("stamp cleared where kept", "PDG003", _stamp_cleared_on_keep),
    Mutant("stamp on the wall clock", "PDG003", _stamp_on_wall_clock),
    Mutant("entry through getattr", "PDG000", _entry_through_getattr),
    Mutant("deadline helper replaced by a decorator", "PDG000", _helper_decorated),
    Mutant("import time removed", "PDG005", _remove_import("time")),
    Mutant("import os removed", "PDG005", _remove_import("os")),
    *DECODE_MUTANTS,
)
MUTANT = {mutant.name: mutant for mutant in MUTANTS}


def mutate_tree(root: Path, mutant: Mutant) -> None:
    """Apply ``mutant`` to the tree at ``root`` in place (it must apply there)."""
    rels = (PREFILL, NIXL, MOONCAKE, DECODE_PATH)
    texts = {rel: (root / rel).read_text() for rel in rels if (root / rel).is_file()}
    mutated = mutant.mutate(texts)
    assert mutated is not None, f"{mutant.name}: nothing to mutate in {root}"
    for rel, text in mutated.items():
        if text != texts[rel]:
            (root / rel).write_text(text)


# -- correct variants in another style --------------------------------------------------------


def _renamed_wall_clock(texts: Texts) -> Texts | None:
    """Other names, time.time() instead of time.monotonic()."""
    text = texts[PREFILL].replace(STAMP_ATTR, "kv_enqueue_ts")
    text = text.replace("time.monotonic()", "time.time()")
    text = text.replace(DEADLINE_HELPER, "_abort_stale_transfers")
    return None if text == texts[PREFILL] else {**texts, PREFILL: text}


def _inline_loop(texts: Texts) -> Texts | None:
    """The deadline written inline before the poll, no helper, a local clock variable."""

    def change(source: _Source) -> bool:
        calls = _deadline_calls(source)
        if not calls:
            return False
        i = source.indent(calls[0])
        # the timeout read as the patch reads it (envs.X.get() or a call of its reader)
        read = next(
            ast.unparse(n.value)
            for n in ast.walk(next(_function(source, DEADLINE_HELPER)))
            if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "timeout"
        )
        inline = [
            f"{i}current = time.monotonic()\n",
            f"{i}limit = {read}\n",
            f"{i}for waiting in self.disagg_prefill_inflight_queue:\n",
            f"{i}    enqueued = getattr(waiting, '{STAMP_ATTR}', None)\n",
            f"{i}    if enqueued is None or limit <= 0:\n",
            f"{i}        continue\n",
            f"{i}    if current - enqueued > limit:\n",
            f"{i}        kv_sender = waiting.disagg_kv_sender\n",
        ]
        if "pending_bootstrap" in ast.unparse(next(_function(source, DEADLINE_HELPER))):
            # parked requests (0.5.16+): not counted while their sender bootstraps
            inline[3:3] = [
                f"{i}    if waiting.pending_bootstrap and (\n",
                f"{i}        waiting.disagg_kv_sender.poll() == KVPoll.Bootstrapping\n",
                f"{i}    ):\n",
                f"{i}        waiting.{STAMP_ATTR} = current\n",
                f"{i}        continue\n",
            ]
        # fail the sender as pdguard does: abort(), which every sender's poll() honours;
        # under PP only while this stage still polls the transfer as unfinished
        # and, on every path, only while this rank still polls the transfer as unfinished
        inline.append(f"{i}        stage_state = kv_sender.poll()\n")
        inline.append(f"{i}        if stage_state != KVPoll.Success:\n")
        inline.append(f"{i}            kv_sender.abort()\n")
        source.replace(source.marked_start(calls[0], INFLIGHT_MARKER), _end(calls[0]), inline)
        return True

    return _edit(texts, PREFILL, change)


def _stamp_through_helper(texts: Texts) -> Texts | None:
    """The stamp set by a helper method called at the append site."""

    def change(source: _Source) -> bool:
        stamps = [s for s in _stamps(source) if _stamp_statement(source, s) is s]
        helper = next(_function(source, DEADLINE_HELPER), None)
        if not stamps or helper is None:
            return False
        stamp = stamps[0]
        call = f"{source.indent(stamp)}self._stamp_inflight_entry({_stamped_name(stamp)})\n"
        source.replace(stamp.lineno, _end(stamp), [call])
        i = source.indent(helper)
        stamp_helper = [
            f"{i}def _stamp_inflight_entry(self, req):\n",
            f"{i}    req.{STAMP_ATTR} = time.monotonic()\n",
            "\n",
        ]
        source.insert(source.marked_start(helper, INFLIGHT_MARKER), stamp_helper)
        return True

    return _edit(texts, PREFILL, change)


VARIANTS = (
    ("other names and time.time()", _renamed_wall_clock),
    ("inline loop before the poll", _inline_loop),
    ("stamp through a helper method", _stamp_through_helper),
)


def main() -> None:
    """``python -m tests.mutants [--all]``: the kill rate and false positives over the pinned
    releases (those with ci = true, or all with --all), as docs/unseen.md reports them."""
    import sys
    import tempfile

    from pdguard import checks
    from pdguard.checks.project import Project
    from pdguard.commands.check import load_project
    from pdguard.tree import open_tree
    from pdguard.vendor_sglang import load_manifest
    from tests.helpers import patched_copy

    everything = "--all" in sys.argv
    false_positives = variants = 0
    by_rule: dict[str, list[int]] = {}  # code -> [killed, generated]
    survivors = []
    for release in load_manifest():
        if release.family == "F1" or not (release.ci or everything):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = patched_copy(release.version, Path(tmp) / "tree")
            texts = load_project(open_tree(root)).texts
        # a mutant counts only against a patched tree that checks clean
        base = checks.run(Project(texts))
        assert not base, f"{release.version}: patched tree not clean: {base}"
        for mutant in MUTANTS:
            mutated = mutant.mutate(texts)
            if mutated is not None:
                tally = by_rule.setdefault(mutant.expected, [0, 0])
                tally[1] += 1
                if mutant.expected in {f.code for f in checks.run(Project(mutated))}:
                    tally[0] += 1
                else:
                    survivors.append(f"{release.version}: {mutant.name}")
        for _, variant in VARIANTS:
            variants += 1
            # the prefill rules: the decode side (PDG006/PDG007) is not what these vary
            prefill = [c for c in checks.CODES if c not in ("PDG006", "PDG007")]
            false_positives += bool(checks.run(Project(variant(texts) or texts), prefill))
    killed = sum(k for k, _ in by_rule.values())
    total = sum(t for _, t in by_rule.values())
    print(f"mutants reported: {killed}/{total} ({killed / total:.0%})")
    for code, (k, t) in sorted(by_rule.items()):
        print(f"  {code}: {k}/{t} ({k / t:.0%})")
    for survivor in survivors:
        print(f"  not reported: {survivor}")
    print(f"false positives on correct variants: {false_positives}/{variants}")


if __name__ == "__main__":
    main()
