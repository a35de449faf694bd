"""The files the rules read, parsed once with ``ast``."""

from __future__ import annotations

import ast
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import cached_property, lru_cache
from typing import Generic, TypeVar

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


def parse_module(text: str, rel: str) -> ast.Module:
    """Parsed once per content, whatever the path: ``verify`` checks a ref before and after
    patching it, consecutive refs share most files, and the codemods read the tree the checker
    read (so its models, kept by the tree's identity, are built once)."""
    try:
        return _parse(text)
    except (SyntaxError, ValueError):
        return ast.parse(text, filename=rel)  # raises again, naming the file


@lru_cache(maxsize=256)
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


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

    def _selected(self, test: Callable[[str], bool]) -> tuple[tuple[str, int], ...]:
        """The files whose text passes ``test``, by path: (path, the identity of its tree)."""
        return tuple(
            (rel, id(self._parsed(rel))) for rel in sorted(self.texts) if test(self.texts[rel])
        )

    def _index(self, files: tuple[tuple[str, int], ...]) -> ClassIndex:
        index = ClassIndex()
        for rel, _ in files:
            index.add_module(rel, self._parsed(rel), self.texts[rel])
        return index

    @cached_property
    def classes(self) -> ClassIndex:
        files = self._selected(lambda text: any(needle in text for needle in SENDER_NEEDLES))
        return _CLASSES.get(files, lambda: self._index(files))

    @cached_property
    def receivers(self) -> ReceiverIndex:
        """The ``BaseKVReceiver`` classes (a class index of their own: the sender rules read
        ``classes`` only)."""
        files = self._selected(lambda text: any(needle in text for needle in RECEIVER_NEEDLES))
        return _RECEIVERS.get(files, lambda: ReceiverIndex(self._index(files)))

    @cached_property
    def decode_queues(self) -> DecodeQueueModel:
        """The decode queues and the scheduler functions that poll them."""
        # a request's receiver, and a poll reduce or a decode queue of the scheduler
        files = self._selected(
            lambda text: REQ_RECEIVER in text and any(needle in text for needle in DECODE_NEEDLES)
        )
        return _DECODE_QUEUES.get(files, lambda: DecodeQueueModel(self._index(files)))


_T = TypeVar("_T")


class _Kept(Generic[_T]):
    """Models by the paths and parsed trees (by identity: ``parse_module`` gives one tree per
    text) they were built from, for the process; a kept model holds its trees, so an identity
    in a key is never another tree's. A model is only read once built (its own caches aside),
    so projects with the same files share one: ``check`` and ``apply`` build them for the
    original and the patched tree, the fixes for each step, and ``verify`` for neighbouring
    refs, most of whose files are the same."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.kept: OrderedDict[tuple[tuple[str, int], ...], _T] = OrderedDict()

    def get(self, files: tuple[tuple[str, int], ...], build: Callable[[], _T]) -> _T:
        if files in self.kept:
            self.kept.move_to_end(files)
            return self.kept[files]
        model = self.kept[files] = build()
        while len(self.kept) > self.size:
            self.kept.popitem(last=False)
        return model


_CLASSES: _Kept[ClassIndex] = _Kept()
_RECEIVERS: _Kept[ReceiverIndex] = _Kept()
_DECODE_QUEUES: _Kept[DecodeQueueModel] = _Kept()
