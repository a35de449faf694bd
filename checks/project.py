"""The files the rules read, parsed once with ``ast``."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

from pdguard.run import Run, run_or_new
from pdguard.sglang_names import (
    DECODE_NEEDLES,
    DISAGGREGATION_DIR,
    ENVIRON_PATH,
    MANAGERS_DIR,
    NEEDLES,
    RECEIVER_NEEDLES,
    REQ_RECEIVER,
    SCHEDULER_DECODE_NEEDLES,
    SENDER_NEEDLES,
)
from pdguard.sglang_names import PREFILL_PATH as PREFILL

from .models.decode_queues import DecodeQueueModel
from .models.inflight import InflightModel, analyse
from .models.kv_receivers import ReceiverIndex
from .models.kv_senders import ClassIndex
from .nodes import first_line

# Files the rules read as text only (never parsed, never a module of the models).
TEXT_ONLY = frozenset({ENVIRON_PATH})


def wanted(rel: str, text: str) -> bool:
    """A cheap text prefilter: only files holding one of ``NEEDLES`` can matter to a rule, and
    the scheduler modules that pop a decode queue themselves (the PP mixin)."""
    if rel.startswith(MANAGERS_DIR + "/"):
        return any(needle in text for needle in SCHEDULER_DECODE_NEEDLES)
    return rel.startswith(DISAGGREGATION_DIR + "/") and any(needle in text for needle in NEEDLES)


# ``class Name(bases)`` and ``class Name``, searched by their literal start (fast) and kept
# where only blanks precede them on their line (``^[ \t]*`` in a pattern is tried at every
# character of the text)
_CLASS_BASES = re.compile(r"class[ \t]+\w+[ \t]*\(([^)]*)\)")
_CLASS_NAME = re.compile(r"class[ \t]+(\w+)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _at_line_start(pattern: re.Pattern[str], text: str) -> list[str]:
    """The first group of each match of ``pattern`` with only blanks before it on its line:
    ``re.findall`` of the pattern after ``^[ \t]*`` (multiline), the same matches."""
    found = []
    match = pattern.search(text)
    while match is not None:
        start = match.start()
        if text[text.rfind("\n", 0, start) + 1 : start].strip(" \t"):
            match = pattern.search(text, start + 1)  # not at a line's start: it hides nothing
        else:
            found.append(match.group(1))
            match = pattern.search(text, match.end())
    return found


def class_lines(text: str, run: Run | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of the classes ``text`` defines and the base lists they name (what is between
    the parentheses of each ``class Name(...)``), each on a line of its own: kept in ``run``
    by text, as ``check``, each fix and each neighbouring ref of ``verify`` ask of the same
    files."""
    found = run.class_lines.get(text) if run is not None else None
    if found is None:
        found = (
            tuple(_at_line_start(_CLASS_NAME, text)),
            tuple(_at_line_start(_CLASS_BASES, text)),
        )
        if run is not None:
            run.class_lines.put(text, found)
    return found


def base_files(
    chosen: Mapping[str, str], pool: Mapping[str, str], run: Run | None = None
) -> dict[str, str]:
    """The files of ``pool`` (path -> text) that define, by name, a base class of a class in
    ``chosen`` (path -> text), and those files' own bases, and so on:
    what the class index must also read to follow a class to a base the text prefilter left
    out (a mixin holding ``poll()`` in a file that names no sender or receiver). Text only,
    nothing parsed (each text scanned once in ``run``); a name may bring a file that is not
    needed, never leave one out."""
    defined: dict[str, list[str]] = {}
    for rel, text in pool.items():
        for name in class_lines(text, run)[0]:
            defined.setdefault(name, []).append(rel)
    found: dict[str, str] = {}
    queue = list(chosen.values())
    while queue:
        for bases in class_lines(queue.pop(), run)[1]:
            for name in _IDENTIFIER.findall(bases):
                for rel in defined.get(name, ()):
                    if rel not in chosen and rel not in found:
                        found[rel] = pool[rel]
                        queue.append(pool[rel])
    return found


def parse_module(text: str, rel: str, run: Run | None = None) -> ast.Module:
    """Parsed once per content in a run, whatever the path: ``verify`` checks a ref before
    and after patching it, consecutive refs share most files, and the codemods read the tree
    the checker read (so its models, kept by the tree, are built once). Without a ``run``, a
    plain parse (nothing kept).

    A new text of a path reuses the top-level statements of the last text parsed for it that
    come before the first line where the two differ (same lines, same positions): only the
    rest is parsed (``_parse_after``). Those statements are shared by both trees, which
    nothing changes once parsed (``checks.nodes``)."""
    tree = run.trees.get(text) if run is not None else None
    if tree is None:
        try:
            tree = _parse_after(text, run.last_tree.get(rel) if run is not None else None)
        except (SyntaxError, ValueError):
            return ast.parse(text, filename=rel)  # raises again, naming the file
        except RecursionError as exc:  # CPython's own limit ("during ast construction")
            # code Python itself cannot compile: a does-not-parse error like any other
            error = SyntaxError(f"nested too deeply for Python's parser ({exc})")
            error.filename, error.lineno, error.offset = rel, 0, 0
            raise error from exc
        if run is not None:
            run.trees.put(text, tree)
    if run is not None:
        run.last_tree[rel] = (text, tree)
    return tree


def _parse_after(text: str, last: tuple[str, ast.Module] | None) -> ast.Module:
    """``ast.parse(text)``, reusing the leading top-level statements of ``last`` (an earlier
    text and its tree) that end where the next one starts, before the first line where the
    texts differ. The rest
    is parsed after as many empty lines as it is below the top, so every position is the one a
    whole parse gives."""
    if last is None or "barry_as_FLUFL" in text:  # the one future import that changes syntax
        return ast.parse(text)
    old_text, old_tree = last
    differs = _first_difference(old_text, text)
    first_changed = text.count("\n", 0, differs) + 1
    body = old_tree.body
    # a statement is kept when the next one starts before the first changed line: that line
    # ends it in both texts (a block ends at the next line of code that is less indented)
    kept = 0
    while kept + 1 < len(body) and first_line(body[kept + 1]) < first_changed:
        kept += 1
    # and starts on a line of its own (not ``a; b``)
    while kept > 0 and first_line(body[kept]) <= (body[kept - 1].end_lineno or 0):
        kept -= 1
    if kept == 0:
        return ast.parse(text)
    last_line = body[kept - 1].end_lineno or 0
    start = 0
    for _ in range(last_line):
        start = text.index("\n", start) + 1
    rest = ast.parse("\n" * last_line + text[start:])
    return ast.Module(body=[*body[:kept], *rest.body], type_ignores=rest.type_ignores)


def _first_difference(old: str, new: str) -> int:
    """The length of the longest common prefix of ``old`` and ``new`` (comparisons of halves,
    each in C)."""
    low, high = 0, min(len(old), len(new))
    while low < high:
        middle = (low + high + 1) // 2
        if old[low:middle] == new[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class Project:
    """Texts by relative path (only those that passed ``wanted``), parsed lazily; the trees
    and models are kept in ``run`` (a new one when none is given), so projects of one run with
    the same files share them: ``check`` and ``apply`` build them for the original and the
    patched tree, the fixes for each step, and ``verify`` for neighbouring refs, most of whose
    files are the same. A model is only read once built (its own caches aside)."""

    def __init__(self, texts: Mapping[str, str], run: Run | None = None) -> None:
        self.texts = dict(texts)
        self.run = run_or_new(run)
        self._trees: dict[str, ast.Module] = {}
        # PDG009's: the tree to run (``simulate.confirm.attach``), and what running it found
        self.confirm_tree: Any = None
        self.confirmation: Any = None

    def tree(self, rel: str) -> ast.Module | None:
        return self._parsed(rel) if rel in self.texts else None

    def _parsed(self, rel: str) -> ast.Module:
        """The tree of a path in ``texts``."""
        if rel not in self._trees:
            self._trees[rel] = parse_module(self.texts[rel], rel, self.run)
        return self._trees[rel]

    @cached_property
    def inflight(self) -> InflightModel | None:
        tree = self.tree(PREFILL)
        return inflight_model(tree, self.run) if tree is not None else None

    def _selected(self, test: Callable[[str], bool]) -> tuple[tuple[str, ast.Module], ...]:
        """The files whose text passes ``test``, and the files of the project that define their
        classes' bases (``base_files``), by path: (path, its tree). A kept model holds its
        trees, and a tree is its own key (``ast`` nodes compare by identity)."""
        code = {rel: text for rel, text in self.texts.items() if rel not in TEXT_ONLY}
        passed = {rel: text for rel, text in code.items() if test(text)}
        rels = {*passed, *base_files(passed, code, self.run)}
        return tuple((rel, self._parsed(rel)) for rel in sorted(rels))

    def _index(self, files: tuple[tuple[str, ast.Module], ...]) -> ClassIndex:
        index = ClassIndex()
        for rel, tree in files:
            index.add_module(rel, tree, self.texts[rel])
        return index

    @cached_property
    def classes(self) -> ClassIndex:
        files = self._selected(lambda text: any(needle in text for needle in SENDER_NEEDLES))
        model: ClassIndex = self.run.classes.get_or_build(files, lambda: self._index(files))
        return model

    @cached_property
    def receivers(self) -> ReceiverIndex:
        """The ``BaseKVReceiver`` classes (a class index of their own: the sender rules read
        ``classes`` only)."""
        files = self._selected(lambda text: any(needle in text for needle in RECEIVER_NEEDLES))
        model: ReceiverIndex = self.run.receivers.get_or_build(
            files, lambda: ReceiverIndex(self._index(files), self.run.verdicts)
        )
        return model

    @cached_property
    def decode_queues(self) -> DecodeQueueModel:
        """The decode queues and the scheduler functions that poll them."""
        # a request's receiver, and a poll reduce or a decode queue of the scheduler; or a
        # decode loop that calls a decode queue's pop method (each one is judged)
        files = self._selected(
            lambda text: (
                (REQ_RECEIVER in text and any(needle in text for needle in DECODE_NEEDLES))
                or any(needle in text for needle in SCHEDULER_DECODE_NEEDLES)
            )
        )
        model: DecodeQueueModel = self.run.decode_queues.get_or_build(
            files, lambda: DecodeQueueModel(self._index(files))
        )
        return model


def inflight_model(tree: ast.Module, run: Run | None) -> InflightModel | None:
    """``inflight.analyse(tree)``, once per tree in ``run``: check and the inflight fix read
    the same tree."""
    if run is None:
        return analyse(tree)
    model: InflightModel | None = run.inflight.get_or_build(tree, lambda: (analyse(tree),))[0]
    return model
