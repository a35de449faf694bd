"""Inserting statements next to an anchor statement, wherever it sits in the tree."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst


def _split_leading(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Blank lines before the first comment, and the rest (comments describe their statement)."""
    lines = list(lines)
    for index, line in enumerate(lines):
        if line.comment is not None:
            return lines[:index], lines[index:]
    return lines, []


class _InsertAround(cst.CSTTransformer):
    def __init__(
        self,
        anchor: cst.CSTNode,
        before: Sequence[cst.BaseStatement],
        after: Sequence[cst.BaseStatement],
    ) -> None:
        super().__init__()
        self.anchor = anchor
        self.before = list(before)
        self.after = list(after)
        self.done = False

    def _rewrite(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        for index, stmt in enumerate(body):
            if stmt is self.anchor:
                new_body = list(body[:index])
                anchor = stmt
                if self.before:
                    blanks, rest = _split_leading(anchor.leading_lines)  # type: ignore[attr-defined]
                    first = self.before[0]
                    new_body.append(
                        first.with_changes(leading_lines=[*blanks, *first.leading_lines])  # type: ignore[attr-defined]
                    )
                    new_body.extend(self.before[1:])
                    if isinstance(anchor, cst.FunctionDef | cst.ClassDef):
                        rest = [*blanks, *rest]  # definitions stay apart from each other
                    anchor = anchor.with_changes(leading_lines=rest)  # type: ignore[attr-defined]
                new_body.append(anchor)
                new_body.extend(self.after)
                new_body.extend(body[index + 1 :])
                self.done = True
                return new_body
        return None

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        if isinstance(updated_node, cst.IndentedBlock | cst.Module) and not self.done:
            body = self._rewrite(original_node.body)
            if body is not None:
                # Children were not changed by this transformer before the anchor was found.
                return updated_node.with_changes(body=body)
        return updated_node


def insert_around(
    tree: cst.Module,
    anchor: cst.BaseStatement,
    before: Sequence[cst.BaseStatement] = (),
    after: Sequence[cst.BaseStatement] = (),
) -> cst.Module:
    """``tree`` with ``before`` inserted above ``anchor`` (taking over the blank lines above it)
    and ``after`` below it. ``anchor`` must be a statement node of ``tree`` itself."""
    transformer = _InsertAround(anchor, before, after)
    result = tree.visit(transformer)
    if not transformer.done:
        raise ValueError("anchor statement not found in tree")
    return result  # type: ignore[return-value]


class _Replace(cst.CSTTransformer):
    def __init__(self, old: cst.CSTNode, new: cst.CSTNode | None) -> None:
        super().__init__()
        self.old, self.new = old, new

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        if original_node is self.old:
            return cst.RemoveFromParent() if self.new is None else self.new
        return updated_node


def replace_node(tree: cst.Module, old: cst.CSTNode, new: cst.CSTNode | None) -> cst.Module:
    """``tree`` with node ``old`` (by identity) replaced by ``new``, or removed if None."""
    return tree.visit(_Replace(old, new))  # type: ignore[return-value]


def parse_statements(code: str, config: cst.PartialParserConfig) -> list[cst.BaseStatement]:
    """Statements of ``code``, keeping comment lines above the first one (a plain parse would
    make them the module's header)."""
    return list(cst.parse_module(f"pass\n{code}", config=config).body[1:])


def parse_method(code: str, config: cst.PartialParserConfig) -> cst.FunctionDef:
    """A method written at class-body indentation (so docstrings keep their indentation)."""
    cls = parse_statements(f"class _:\n{code}", config)[0]
    assert isinstance(cls, cst.ClassDef)
    return cls.body.body[0]  # type: ignore[return-value]


def enclosing_statement(tree: cst.Module, node: cst.CSTNode) -> cst.BaseStatement:
    """The innermost statement (simple line or compound) that contains ``node``."""
    from libcst.metadata import MetadataWrapper, ParentNodeProvider

    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    parents = wrapper.resolve(ParentNodeProvider)
    current: cst.CSTNode = node
    while not isinstance(current, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        current = parents[current]
    return current  # type: ignore[return-value]
