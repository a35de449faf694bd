"""Statement-level edits next to anchor statements, applied to a module in one pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar, cast

import libcst as cst

from pdguard.run import Run

from .anchors import COMPOUND as _COMPOUND
from .anchors import HOLDERS as _HOLDERS
from .anchors import children, nodes

_KEEP = object()
_NodeT = TypeVar("_NodeT", bound=cst.CSTNode)

# A statement of a body (what ``cst.Module.body`` holds; both kinds have ``leading_lines``).
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


@dataclass
class StatementEdit:
    """What happens around (and to) one anchor statement."""

    before: list[Statement] = field(default_factory=list)
    after: list[Statement] = field(default_factory=list)
    # The anchor's replacement (None removes it); by default the anchor stays.
    replacement: object = _KEEP


def _split_leading(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Blank lines before the first comment, and the rest (comments describe their statement)."""
    lines = list(lines)
    for index, line in enumerate(lines):
        if line.comment is not None:
            return lines[:index], lines[index:]
    return lines, []


class _ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: dict[int, tuple[cst.CSTNode, StatementEdit]]) -> None:
        super().__init__()
        self.edits = edits
        self.applied: set[int] = set()

    def _rewrite(self, original: Sequence, updated: Sequence) -> list | None:
        if not any(id(stmt) in self.edits for stmt in original):
            return None
        body: list = []
        for orig, stmt in zip(original, updated, strict=True):
            if id(orig) not in self.edits:
                body.append(stmt)
                continue
            self.applied.add(id(orig))
            edit = self.edits[id(orig)][1]
            if edit.replacement is not _KEEP:
                stmt = edit.replacement
            if edit.before:
                blanks, rest = _split_leading(orig.leading_lines)
                first = edit.before[0]
                body.append(first.with_changes(leading_lines=[*blanks, *first.leading_lines]))
                body.extend(edit.before[1:])
                if stmt is not None:
                    if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
                        rest = [*blanks, *rest]  # definitions stay apart from each other
                    stmt = stmt.with_changes(leading_lines=rest)
            if stmt is not None:
                body.append(stmt)
            body.extend(edit.after)
        return body

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Anchors are statements: walk only into nodes that hold statements.
        return type(node) in _HOLDERS

    def on_leave(self, original_node: _NodeT, updated_node: _NodeT) -> _NodeT:
        if isinstance(original_node, cst.IndentedBlock | cst.Module) and isinstance(
            updated_node, cst.IndentedBlock | cst.Module
        ):
            body = self._rewrite(original_node.body, updated_node.body)
            if body is not None:
                # the same node type (isinstance on a union loses the TypeVar)
                return cast(_NodeT, updated_node.with_changes(body=body))
        return updated_node


def apply_edits(tree: cst.Module, edits: Sequence[tuple[cst.CSTNode, StatementEdit]]) -> cst.Module:
    """``tree`` with every edit done; each anchor must be a statement node of ``tree`` itself."""
    by_id: dict[int, tuple[cst.CSTNode, StatementEdit]] = {}
    for anchor, edit in edits:
        if id(anchor) in by_id:  # two edits on one anchor: merge them
            known = by_id[id(anchor)][1]
            known.before += edit.before
            known.after += edit.after
            if edit.replacement is not _KEEP:
                known.replacement = edit.replacement
        else:
            by_id[id(anchor)] = (anchor, edit)
    transformer = _ApplyEdits(by_id)
    result = tree.visit(transformer)
    missing = set(by_id) - transformer.applied
    if missing:
        raise ValueError(f"{len(missing)} anchor statement(s) not found in the tree")
    return result


def parse_statements(code: str, config: cst.PartialParserConfig) -> list[Statement]:
    """Statements of ``code`` (written with ``\\n``), in the target's line endings, keeping
    comment lines above the first one (a plain parse would make them the module's header).

    While a run edits a module (``editing``), a snippet is parsed once a run (``Run.snippets``:
    ``verify``'s refs insert the same ones) and its nodes shared between modules, never within
    one: anchors are found by identity, so a second request for it in the same module gets
    nodes of its own. Outside (a codemod run by ``libcst.tool`` or a ``CodemodTest``), each
    request is parsed."""
    now = _EDITING.get()
    if now is None:
        return list(_parsed_statements(code, config))
    run, given = now
    key = (code, config)
    if key in given:
        return list(_parsed_statements(code, config))
    given.add(key)
    return list(run.snippets.get_or_build(key, lambda: _parsed_statements(code, config)))


# The module a run is editing: its run, and the snippets handed out for it so far. Set by
# ``editing`` for the codemods of one module and reset after them (a context variable, not a
# cache: nothing in it outlives the module).
_EDITING: ContextVar[tuple[Run, set[tuple[str, cst.PartialParserConfig]]] | None] = ContextVar(
    "pdguard_editing", default=None
)


@contextmanager
def editing(run: Run) -> Iterator[None]:
    """The codemods of one module run in the block (``codemods.runner``): snippets come from
    ``run``, each handed out once in the module."""
    token = _EDITING.set((run, set()))
    try:
        yield
    finally:
        _EDITING.reset(token)


def _parsed_statements(code: str, config: cst.PartialParserConfig) -> tuple[Statement, ...]:
    newline = config.default_newline if isinstance(config.default_newline, str) else "\n"
    code = f"pass\n{code}".replace("\n", newline)
    return tuple(cst.parse_module(code, config=config).body[1:])


def parse_method(code: str, config: cst.PartialParserConfig) -> cst.FunctionDef:
    """A method written at class-body indentation (so docstrings keep their indentation)."""
    cls = parse_statements(f"class _:\n{code}", config)[0]
    assert isinstance(cls, cst.ClassDef)
    method = cls.body.body[0]
    assert isinstance(method, cst.FunctionDef)
    return method


def simple_statements(
    scope: cst.CSTNode, predicate: Callable[[cst.SimpleStatementLine], bool]
) -> list[cst.SimpleStatementLine]:
    """The simple statement lines below ``scope`` for which ``predicate`` holds (expressions
    are not walked into: fast on large modules)."""
    return [
        node
        for node in nodes(scope, _holds_statements)
        if type(node) is cst.SimpleStatementLine and predicate(node)
    ]


def _holds_statements(node: cst.CSTNode) -> bool:
    return type(node) in _HOLDERS


def enclosing_statement(scope: cst.CSTNode, node: cst.CSTNode) -> cst.BaseStatement:
    """The innermost statement below ``scope`` (simple line or compound) containing ``node``."""
    # depth-first, each node with the innermost statement holding it
    stack: list[tuple[cst.CSTNode, cst.BaseStatement | None]] = [(scope, None)]
    while stack:
        current, holder = stack.pop()
        if current is node:
            if holder is None:
                break
            return holder
        if type(current) is cst.SimpleStatementLine or type(current) in _COMPOUND:
            assert isinstance(current, cst.SimpleStatementLine | cst.BaseCompoundStatement)
            holder = current
        stack.extend((child, holder) for child in reversed(children(current)))
    raise ValueError("node not found below scope")
