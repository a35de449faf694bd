"""``check``: run the rules on a tree and keep the findings the user asked for."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pdguard import checks
from pdguard.checks import Finding, Project
from pdguard.checks.project import wanted

from .sglang_names import DISAGGREGATION_DIR
from .source_file import SourceDecodeError, SourceFile
from .tree import PREFILL_PATH, DirectoryTree, SourceTree, TargetError, open_tree

# `# pdguard: ignore` (every code) or `# pdguard: ignore[PDG001, PDG004]` (those codes only);
# `ignored`, `ignore-x` are no suppression, and a bracket of unknown codes suppresses nothing.
_SUPPRESSION = re.compile(r"#\s*pdguard:\s*ignore(?![\w-])(?:\s*\[(?P<codes>[^\]]*)\])?", re.I)


@dataclass
class CheckResult:
    tree: SourceTree
    findings: list[Finding]
    suppressed: int
    project: Project

    def display_path(self, finding: Finding) -> str:
        path = self.tree.display(finding.path)
        if not isinstance(self.tree, DirectoryTree):
            return path
        try:
            return os.path.relpath(path)
        except ValueError:
            return path


def load_project(tree: SourceTree) -> Project:
    """The files the rules can need (text prefilter first), decoded."""
    texts = {}
    for rel in tree.python_files(DISAGGREGATION_DIR):
        data = tree.read_bytes(rel)
        if data is None:
            continue
        try:
            text = SourceFile.decode(rel, data).text
        except SourceDecodeError as exc:
            raise TargetError(str(exc)) from exc
        if rel == PREFILL_PATH or wanted(rel, text):
            texts[rel] = text
    return Project(texts)


def _suppressed(finding: Finding, project: Project) -> bool:
    lines = project.texts.get(finding.path, "").splitlines()
    if not 0 < finding.line <= len(lines):
        return False
    for match in _SUPPRESSION.finditer(lines[finding.line - 1]):
        codes = match.group("codes")
        if codes is None or finding.code in {c.strip().upper() for c in codes.split(",")}:
            return True
    return False


def _parse_all(tree: SourceTree, project: Project) -> None:
    """Parse every file the rules may read, so that one that does not parse is an error
    whatever rules are selected (and names its own file and line)."""
    for rel, text in sorted(project.texts.items()):
        try:
            project.tree(rel)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            line, col = getattr(exc, "lineno", None), getattr(exc, "offset", None)
            if not line and "\0" in text:  # Python gives no position for a NUL byte
                before = text[: text.index("\0")]
                line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
            msg = getattr(exc, "msg", None) or str(exc)
            where = f"{tree.display(rel)}:{line or 0}:{col or 0}"
            raise TargetError(f"{where}: does not parse: {msg}") from exc


def check_tree(tree: SourceTree, codes: Iterable[str] = checks.CODES) -> CheckResult:
    project = load_project(tree)
    _parse_all(tree, project)
    try:
        found = checks.run(project, codes)
    except SyntaxError as exc:
        where = f"{tree.display(exc.filename or '')}:{exc.lineno or 0}:{exc.offset or 0}"
        raise TargetError(f"{where}: does not parse: {exc.msg}") from exc
    kept = [f for f in found if not _suppressed(f, project)]
    return CheckResult(tree, kept, len(found) - len(kept), project)


def select_codes(select: Sequence[str] | None, ignore: Sequence[str] | None) -> list[str]:
    """The rule codes to run, from --select/--ignore (comma-separated, prefixes allowed)."""

    def expand(values: Sequence[str]) -> set[str]:
        wanted_codes: set[str] = set()
        for value in values:
            for part in filter(None, (p.strip().upper() for p in value.split(","))):
                matches = {c for c in checks.CODES if c.startswith(part)}
                if not matches:
                    raise TargetError(
                        f"unknown rule code {part!r} (known: {', '.join(checks.CODES)})"
                    )
                wanted_codes |= matches
        return wanted_codes

    chosen = expand(select) if select is not None else set(checks.CODES)
    chosen -= expand(ignore) if ignore else set()
    if not chosen:
        raise TargetError("--select/--ignore leave no rule to run")
    return [c for c in checks.CODES if c in chosen]


def trees_for(paths: Sequence[str]) -> list[SourceTree]:
    """The SGLang trees to check: a tree for each directory argument, and the tree around each
    file argument (as pre-commit passes them). Files outside any SGLang tree are skipped."""
    trees: dict[Path, SourceTree] = {}
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            tree = open_tree(path)
        elif path.is_file():
            tree = _tree_around(path)
            if tree is None:
                continue
        else:
            raise TargetError(f"{path}: no such file or directory")
        trees.setdefault(tree.base.resolve(), tree)
    if not trees:
        raise TargetError(f"{', '.join(paths)}: not in an SGLang tree (no {PREFILL_PATH} above)")
    return list(trees.values())


def _tree_around(file: Path) -> DirectoryTree | None:
    for parent in file.resolve().parents:
        if (parent / PREFILL_PATH).is_file():
            return DirectoryTree(root=parent, base=parent)
    return None
