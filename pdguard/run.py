"""One run of pdguard: the ``Run`` that owns every cache a command fills, and the hollowing
switch.

A command makes one ``Run`` (``check``, ``apply``, ``verify``, ``carry``, ``demo``, ``export``,
``simulate``: each ``run(args)``), hands it down (``Workspace(tree, run=...)``,
``Project(texts, run=...)``, ``check_tree(tree, run=...)``, ``apply.plan(tree, run=...)``), and
drops it when it ends; the codemods find it in their ``CodemodContext``
(``context.scratch[RUN]``, put there by ``codemods.runner``), with the whole text of the module
they edit (``context.scratch[SOURCE]``). A library caller or a test that passes none gets a
fresh ``Run`` at each entry point, so nothing outlives the call; a test that wants to steer a
run (no hollowing, a spy on what was transformed) builds its own ``Run`` and passes it.

Every cache is keyed by content (a text, a parsed tree held by the cache itself), never by
``id()`` of an object the cache does not hold. The module imports nothing of pdguard: the
checks, the codemods and the commands all import it.
"""

from __future__ import annotations

import ast
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sized
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_S = TypeVar("_S", bound=Sized)

# The keys of what a run puts in a codemod's ``CodemodContext.scratch``.
RUN = "pdguard.run"  # the Run
SOURCE = "pdguard.source"  # (the module handed to the codemod, its whole text)
HOLLOWED = "pdguard.hollowed"  # the hollowing of that text (codemods.holes.Hollowed) or None
WHOLE_READ = "pdguard.whole_read"  # set when a codemod read the text beyond its hollowed module


class Kept(Generic[_K, _V]):
    """A bounded map, the least recently used entry dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[_K, _V] = OrderedDict()

    def get(self, key: _K) -> _V | None:
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key: _K, value: _V) -> _V:
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value

    def get_or_build(self, key: _K, build: Callable[[], _V]) -> _V:
        value = self.get(key)
        return self.put(key, build()) if value is None else value

    def __len__(self) -> int:
        return len(self.entries)


# Git blob bytes a run keeps, at most (least recently used go first).
GIT_BLOB_BYTES = 64 << 20


class Bounded(Kept[_K, _S]):
    """A ``Kept`` bounded by the total length of its values (``limit``), not their number;
    never the last one put is dropped."""

    def __init__(self, limit: int) -> None:
        super().__init__(0)
        self.limit = limit
        self.total = 0

    def put(self, key: _K, value: _S) -> _S:
        old = self.entries.pop(key, None)
        if old is not None:
            self.total -= len(old)
        self.entries[key] = value
        self.total += len(value)
        while self.total > self.limit and len(self.entries) > 1:
            self.total -= len(self.entries.popitem(last=False)[1])
        return value


class Settings(NamedTuple):
    """What a run is asked to do (``Run.settings``)."""

    hollow: bool
    confirm: bool


@dataclass
class Run:
    """What one command keeps while it runs.

    * ``hollow``: whether codemods that say where they reach (``Command.scope``) run on the
      hollowed module (``codemods.holes``); a test turns it off to compare bytes.
    * ``trees``: ``ast`` trees by text (``checks.project.parse_module``), and ``last_tree``,
      the last text parsed for each path with its tree (a new version of the file reuses its
      leading statements).
    * ``classes``, ``receivers``, ``decode_queues``: the models of ``checks.project.Project``
      by the files (path, tree) they were built from; ``inflight``: the inflight model by the
      ``prefill.py`` tree it was built from; ``class_lines``: the classes each text defines
      and the bases they name, by text (``checks.project.class_lines``).
    * ``cst_modules``: LibCST modules by text; ``transformed``: what codemods made of a text
      (by the text, the hollowing switch and the codemods' keys); ``hollow_made``: what they
      made of a hollowed text when they read nothing else of the module; ``snippets``: the
      statements codemods insert, parsed once per (code, parser config)
      (``codemods.insertion.parse_statements``).
    * ``verdicts``: the receiver verdicts of ``checks.models.kv_receivers`` by class name,
      with the answers they were worked out from.
    * ``git_trees``, ``git_blobs``: git tree entries and blob bytes by object id
      (``pdguard.git_tree``; blobs bounded by ``GIT_BLOB_BYTES``), which neighbouring refs of
      one ``verify`` share.
    * ``confirm``: ``verify --confirm`` (each ref also run in simulate's sandbox).
    * ``repos``: the git repositories the run opened by path (``verify``'s workers: one each,
      whose ``git cat-file`` processes serve every ref of its lane); ``close()`` (or leaving a
      ``with Run() as run:``) closes them.
    """

    hollow: bool = True
    confirm: bool = False
    trees: Kept[str, ast.Module] = field(default_factory=lambda: Kept(256))
    last_tree: dict[str, tuple[str, ast.Module]] = field(default_factory=dict)
    classes: Kept[tuple[tuple[str, ast.Module], ...], Any] = field(default_factory=lambda: Kept(8))
    receivers: Kept[tuple[tuple[str, ast.Module], ...], Any] = field(
        default_factory=lambda: Kept(8)
    )
    decode_queues: Kept[tuple[tuple[str, ast.Module], ...], Any] = field(
        default_factory=lambda: Kept(8)
    )
    inflight: Kept[ast.Module, tuple[Any]] = field(default_factory=lambda: Kept(16))
    class_lines: Kept[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=lambda: Kept(512)
    )
    cst_modules: Kept[str, Any] = field(default_factory=lambda: Kept(64))
    transformed: Kept[tuple[str, bool, tuple[str, ...]], tuple[bool, str]] = field(
        default_factory=lambda: Kept(256)
    )
    hollow_made: Kept[tuple[str, tuple[str, ...]], tuple[bool, str]] = field(
        default_factory=lambda: Kept(256)
    )
    snippets: Kept[tuple[str, Any], tuple[Any, ...]] = field(default_factory=lambda: Kept(256))
    verdicts: Kept[str, list[tuple[Any, Any]]] = field(default_factory=lambda: Kept(256))
    git_trees: dict[bytes, dict[str, tuple[int, bytes]]] = field(default_factory=dict)
    git_blobs: Bounded[bytes, bytes] = field(default_factory=lambda: Bounded(GIT_BLOB_BYTES))
    repos: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> Settings:
        """What a run is asked to do, without what it keeps (``verify`` hands it to each
        worker's lane: ``Run.of(settings)``)."""
        return Settings(self.hollow, self.confirm)

    @classmethod
    def of(cls, settings: Settings) -> Run:
        """A new run of the same command (keeping nothing yet)."""
        return cls(hollow=settings.hollow, confirm=settings.confirm)

    def close(self) -> None:
        """Close what the run opened (its repositories); what it keeps is dropped with it."""
        repos, self.repos = self.repos, {}
        for repo in repos.values():
            repo.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def run_or_new(run: Run | None) -> Run:
    """``run``, or a new one for a caller that has none (a library call, a test)."""
    return Run() if run is None else run
