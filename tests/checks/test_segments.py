"""``checks/segments.source_segment`` gives what ``ast.get_source_segment`` gives."""

from __future__ import annotations

import ast

import pytest

from pdguard.checks.segments import source_segment

TOY = """\
def greet(name="wörld"):
    message = (
        f"héllo {name}"
        + "!"
    )
    return {"ü": message, "n": [1,
        2]}
"""


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_every_node_of_a_toy_module(newline: str) -> None:
    text = TOY.replace("\n", newline)
    nodes = [node for node in ast.walk(ast.parse(text)) if hasattr(node, "end_lineno")]
    assert len(nodes) > 15
    for node in nodes:
        assert source_segment(text, node) == ast.get_source_segment(text, node)


def test_a_node_without_a_position() -> None:
    assert source_segment("x = 1\n", ast.Load()) is None
