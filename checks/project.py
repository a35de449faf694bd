"""The files the rules read, parsed once with ``ast``."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cached_property, lru_cache

from .inflight import InflightModel, analyse
from .kv_senders import ClassIndex

DISAGGREGATION_DIR = "sglang/srt/disaggregation/"
PREFILL = DISAGGREGATION_DIR + "prefill.py"
# A cheap text prefilter: only files holding one of these can matter to a rule.
NEEDLES = ("KVSender", "KVManager", "disagg_prefill_inflight_queue")


def wanted(rel: str, text: str) -> bool:
    return rel.startswith(DISAGGREGATION_DIR) and any(needle in text for needle in NEEDLES)


@lru_cache(maxsize=128)
def parse_module(text: str, rel: str) -> ast.Module:
    """Parsed once per content: ``verify`` checks a ref before and after patching it, and
    most files are the same."""
    return ast.parse(text, filename=rel)


class Project:
    """Texts by relative path (only those that passed ``wanted``), parsed lazily."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = dict(texts)
        self._trees: dict[str, ast.Module] = {}

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self.texts:
            return None
        if rel not in self._trees:
            self._trees[rel] = parse_module(self.texts[rel], rel)
        return self._trees[rel]

    @cached_property
    def inflight(self) -> InflightModel | None:
        tree = self.tree(PREFILL)
        return analyse(tree) if tree is not None else None

    @cached_property
    def classes(self) -> ClassIndex:
        index = ClassIndex()
        for rel in sorted(self.texts):
            if "KVSender" in self.texts[rel] or "KVManager" in self.texts[rel]:
                index.add_module(rel, self.tree(rel), self.texts[rel])  # type: ignore[arg-type]
        return index
