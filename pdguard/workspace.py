"""The files of one run: read once, decoded once, parsed once per content.

LibCST is imported only when a fix writes, isort only when it adds an import: deciding that
a fix is ``present`` or ``upstream`` needs ``ast`` only.
"""

from __future__ import annotations

import ast
import operator
from collections import OrderedDict
from functools import lru_cache, reduce
from typing import TYPE_CHECKING, TypeVar

from pdguard.checks.project import base_files, parse_module

from .deep import deep_call
from .errors import TargetError, does_not_parse
from .fix_names import unmark
from .sglang_names import DISAGGREGATION_DIR
from .source_file import SourceFile
from .tree import SourceTree

_K = TypeVar("_K")

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import isort
    import libcst as cst

    from pdguard.codemods.command import Transform

# What transforms made of a text (or the AnchorError message they raised), by the text and their
# keys, for the process: ``verify`` meets the same file in consecutive refs.
_TRANSFORMED: OrderedDict[tuple[str, bool, tuple[str, ...]], tuple[bool, str]] = OrderedDict()
# What they made of a hollowed text (holes named by content) when they read nothing else of the
# module: another version of the file that differs only inside the holes gets it, filled.
_HOLLOW_MADE: OrderedDict[tuple[str, tuple[str, ...]], tuple[bool, str]] = OrderedDict()
_KEPT = 256


def _keep(
    cache: OrderedDict[_K, tuple[bool, str]], key: _K, value: tuple[bool, str]
) -> tuple[bool, str]:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _KEPT:
        cache.popitem(last=False)
    return value


@lru_cache(maxsize=64)  # LibCST modules are large: verify meets hundreds of texts
def _parse_cst(text: str) -> cst.Module:
    from pdguard.codemods.command import parse

    return parse(text)


# Whether transforms that declare their scope run on the hollowed module (``codemods/holes``);
# the tests turn it off to compare.
HOLLOW = True


def _transformed(
    text: str, transforms: Sequence[Transform], keys: tuple[str, ...]
) -> tuple[bool, str]:
    """(True, the new text) or (False, the ``AnchorError`` message). Where every transform
    declares its scope, they run on the hollowed module first; a result whose holes cannot
    all be filled, or an ``AnchorError`` there, sends them to the whole module."""
    from pdguard.codemods.holes import hollow, whole_reads

    scopes = [s for s in (t.scope(text) for t in transforms) if s is not None] if HOLLOW else []
    if scopes and len(scopes) == len(transforms):  # every transform says where it reaches
        hollowed = hollow(text, reduce(operator.or_, scopes), by_content=True)
        if hollowed is not None:
            key = (hollowed.text, keys)
            made = _HOLLOW_MADE.get(key)
            if made is None:
                reads = whole_reads()
                made = _run(_parse_cst(hollowed.text), transforms)
                if whole_reads() == reads:  # a function of the hollowed text and the keys
                    _keep(_HOLLOW_MADE, key, made)
            done, result = made
            filled = hollowed.fill(result) if done else None
            if filled is not None:
                return True, filled
    return _run(_parse_cst(text), transforms)


def _run(module: cst.Module, transforms: Sequence[Transform]) -> tuple[bool, str]:
    from pdguard.codemods.anchors import AnchorError
    from pdguard.codemods.insertion import new_module

    new_module()
    try:
        for transform in transforms:
            module = transform.transform_module(module)
    except AnchorError as exc:
        return False, str(exc)
    return True, module.code


class Workspace:
    """The original and the current (fixed so far) text of the tree's files.

    ``markers``: whether the code the fixes write carries their marker comments (``# pdguard:
    <fix>``, how a later run says ``present``); without them (``apply --no-markers``, ``export``)
    a later run recognises the code by what it does (``upstream``). The one place this is
    decided: every fix writes through ``transform``."""

    def __init__(self, tree: SourceTree, *, markers: bool = True) -> None:
        self.tree = tree
        self.markers = markers
        self.originals: dict[str, SourceFile] = {}
        self.current: dict[str, str] = {}
        # classes the user left out of a fix (``--ignore FIX:Class``), by fix name: that fix
        # leaves them as they are, and the fixes that rely on it do not require them fixed
        self.left_out: dict[str, frozenset[str]] = {}

    def _load(self, rel: str) -> SourceFile | None:
        if rel not in self.originals:
            data = self.tree.read_bytes(rel)
            if data is None:
                return None
            self.originals[rel] = SourceFile.decode(rel, data)  # or a ParseError
        return self.originals[rel]

    def text(self, rel: str) -> str:
        source = self._load(rel)
        if source is None:
            raise TargetError(f"{self.tree.display(rel)}: missing")
        return self.current.get(rel, source.text)

    def set_text(self, rel: str, text: str) -> None:
        self.current[rel] = text

    def ast(self, rel: str) -> ast.Module:
        text = self.text(rel)
        try:
            return parse_module(text, rel)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            raise does_not_parse(self.tree.display(rel), exc, text) from exc

    def module_statements(self, rel: str) -> cst.Module:
        """The module-level statements of ``rel`` with LibCST (each run of definitions is a
        hole: ``codemods/holes``), for the import helpers (``top_level_bindings``,
        ``spelling``), which read nothing else."""
        from pdguard.codemods.command import with_source
        from pdguard.codemods.holes import Scope, hollow

        self.ast(rel)  # a clear error (file:line:col) for code that does not parse
        text = self.text(rel)
        hollowed = hollow(text, Scope(), by_content=True) if HOLLOW else None
        if hollowed is None:
            return _parse_cst(text)
        # versions of the file with the same module-level statements share one parse; the
        # module handed out is a copy of its own, whose source (``source_of``) is this text
        return with_source(_parse_cst(hollowed.text).with_changes(), text)

    def transform(self, rel: str, transforms: Sequence[Transform]) -> bool:
        """Run ``transforms`` one after another on the current text of ``rel`` and keep the
        result; whether the text changed. An ``AnchorError`` propagates and nothing changes.
        The outcome is kept by text and the transforms' keys, so the same file in another ref
        is neither parsed with LibCST nor transformed again."""
        from pdguard.codemods.anchors import AnchorError

        text = self.text(rel)
        keys = tuple(transform.key() for transform in transforms)
        key = (text, HOLLOW, keys)
        known = _TRANSFORMED.get(key)
        if known is None:
            self.ast(rel)  # a clear error (file:line:col) for code that does not parse
            made = deep_call(self.tree.display(rel), lambda: _transformed(text, transforms, keys))
            known = _keep(_TRANSFORMED, key, made)
        else:
            _TRANSFORMED.move_to_end(key)
        done, result = known
        if not done:
            raise AnchorError(result)
        if not self.markers:
            result = unmark(result, text)
        self.set_text(rel, result)
        return result != text

    def isort_config(self, rel: str) -> isort.Config | None:
        """The target's isort settings for ``rel``; None where it has none (the codemods then
        use SGLang's, and import isort only if they add an import)."""
        from .isort_config import isort_config_for

        return isort_config_for(self.tree, rel)[0]

    def files_containing(self, rel_dir: str, *needles: str) -> list[str]:
        """``.py`` files below ``rel_dir`` whose text contains any of ``needles``: a cheap text
        prefilter, so only files that can matter are parsed."""
        return [
            rel
            for rel in self.tree.python_files(rel_dir)
            if any(needle in self.text(rel) for needle in needles)
        ]

    def project_texts(self, rels: Iterable[str]) -> dict[str, str]:
        """The current texts of ``rels`` and of the files that define their classes' bases
        (``checks.project.base_files``, from the disaggregation package): the files a
        ``Project`` of the checker needs, as ``check``'s loader reads them."""
        chosen = {rel: self.text(rel) for rel in rels}
        pool = {rel: self.text(rel) for rel in self.tree.python_files(DISAGGREGATION_DIR)}
        return {**chosen, **base_files(chosen, pool)}

    def changed(self) -> dict[str, SourceFile]:
        """New content of each file whose text changed, keeping its encoding."""
        return {
            rel: self.originals[rel].with_text(text)
            for rel, text in sorted(self.current.items())
            if text != self.originals[rel].text
        }
