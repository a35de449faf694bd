"""The files the rules read, parsed once with ``ast``."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cached_property, lru_cache

from pdguard.sglang_names import (
    DECODE_NEEDLES,
    DISAGGREGATION_DIR,
    MANAGERS_DIR,
    NEEDLES,
    RECEIVER_NEEDLES,
    REQ_RECEIVER,
    SCHEDULER_DECODE_NEEDLES,
    SENDER_NEEDLES,
)
from pdguard.sglang_names import PREFILL_PATH as PREFILL

from .decode_queues import DecodeQueueModel
from .inflight import InflightModel, analyse
from .kv_receivers import ReceiverIndex
from .kv_senders import ClassIndex


def wanted(rel: str, text: str) -> bool:
    """A cheap text prefilter: only files holding one of ``NEEDLES`` can matter to a rule, and
    the scheduler modules that pop a decode queue themselves (the PP mixin)."""
    if rel.startswith(MANAGERS_DIR + "/"):
        return any(needle in text for needle in SCHEDULER_DECODE_NEEDLES)
    return rel.startswith(DISAGGREGATION_DIR + "/") and any(needle in text for needle in NEEDLES)


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
        return self._parsed(rel) if rel in self.texts else None

    def _parsed(self, rel: str) -> ast.Module:
        """The tree of a path in ``texts``."""
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
            if any(needle in self.texts[rel] for needle in SENDER_NEEDLES):
                index.add_module(rel, self._parsed(rel), self.texts[rel])
        return index

    @cached_property
    def receivers(self) -> ReceiverIndex:
        """The ``BaseKVReceiver`` classes (a class index of their own: the sender rules read
        ``classes`` only)."""
        index = ClassIndex()
        for rel in sorted(self.texts):
            if any(needle in self.texts[rel] for needle in RECEIVER_NEEDLES):
                index.add_module(rel, self._parsed(rel), self.texts[rel])
        return ReceiverIndex(index)

    @cached_property
    def decode_queues(self) -> DecodeQueueModel:
        """The decode queues and the scheduler functions that poll them."""
        index = ClassIndex()
        for rel in sorted(self.texts):
            text = self.texts[rel]
            # a request's receiver, and a poll reduce or a decode queue of the scheduler
            if REQ_RECEIVER in text and any(needle in text for needle in DECODE_NEEDLES):
                index.add_module(rel, self._parsed(rel), text)
        return DecodeQueueModel(index)
