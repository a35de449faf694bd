"""What ``apply --repair`` is made of (``commands.apply.repair`` runs it). A fix that was
partly removed (its marker is still there, some of its pieces are not) is restored: the files
that carry its marker are taken back to a pristine copy (the last commit's, when it has no
pdguard marker, else the release's own file from its sha256-checked wheel), the fixes are
planned on that, and the result replaces the files, but only when every line in which a file
differs from the pristine copy is a line of pdguard's fix: a change of the user's own is never
lost (refused instead, naming the line)."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from .errors import PdguardError, RefusedError
from .fix_names import MARKER_PREFIX, has_marker, is_marker_line
from .source_file import SourceFile
from .tree import DirectoryTree


@dataclass(frozen=True)
class RestoredTree(DirectoryTree):
    """A tree on disk with some files read from their pristine copies instead."""

    restored: Mapping[str, bytes] = field(default_factory=dict)

    def read_bytes(self, rel: str) -> bytes | None:
        if rel in self.restored:
            return self.restored[rel]
        return super().read_bytes(rel)


def partly_removed(
    refused: Iterable[str], originals: Mapping[str, SourceFile]
) -> dict[str, list[str]]:
    """The refused fixes whose marker is still in a file a plan read: name -> those files."""
    found: dict[str, list[str]] = {}
    for name in refused:
        files = sorted(rel for rel, f in originals.items() if has_marker(f.text, name))
        if files:
            found[name] = files
    return found


def _git_head(tree: DirectoryTree, rel: str) -> bytes | None:
    """The file in the last commit of the repository the tree is in, if it has no marker."""
    path = tree.path(rel).resolve()
    try:
        done = subprocess.run(
            ["git", "-C", str(path.parent), "show", f"HEAD:./{path.name}"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or MARKER_PREFIX.encode() in done.stdout:
        return None
    return done.stdout


def _wheel_file(tree: DirectoryTree, rel: str) -> bytes | None:
    """The file as the release's wheel has it (vendor_sglang: pinned sha256, or the index's)."""
    version = tree.sglang_version()
    if version is None:
        return None
    from pdguard.vendor_sglang import UnknownReleaseError, fetch_release, fetch_unpinned

    try:
        try:
            root = fetch_release(version)
        except UnknownReleaseError:
            root = fetch_unpinned(version)
    except PdguardError:
        return None
    path = root / rel
    return path.read_bytes() if path.is_file() else None


def pristine(tree: DirectoryTree, rel: str) -> tuple[bytes, str]:
    """(the file's pristine bytes, where they come from), or a RefusedError saying how to get
    them back by hand."""
    data = _git_head(tree, rel)
    if data is not None:
        return data, "the last commit"
    data = _wheel_file(tree, rel)
    if data is not None:
        return data, f"the sglang {tree.sglang_version()} wheel"
    raise RefusedError(
        f"{tree.display(rel)}: --repair has no pristine copy (no commit without pdguard's marker, "
        "no wheel of this release): restore the file by hand, then run `pdguard apply`"
    )


def foreign_line(current: str, base: str, fixed: str) -> str | None:
    """A line in which ``current`` differs from ``base`` that is not pdguard's change of
    ``base`` into ``fixed``; None when there is none. Lines are compared as multisets, blank
    lines left out (a blank line more or less loses nothing).

    A change of ``base`` that carries one of pdguard's marker comments (one run of changed
    lines, between lines both texts share) is pdguard's too: an older pdguard wrote it, and a
    fix it wrote differently from today's is what ``--repair`` is for."""
    base_lines, current_lines, fixed_lines = (
        [line for line in t.splitlines() if line.strip()] for t in (base, current, fixed)
    )
    ours_added: Counter[str] = Counter()
    ours_removed: Counter[str] = Counter()
    matcher = SequenceMatcher(None, base_lines, current_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal" and any(is_marker_line(line) for line in current_lines[j1:j2]):
            ours_added.update(current_lines[j1:j2])
            ours_removed.update(base_lines[i1:i2])
    base_count, current_count, fixed_count = (
        Counter(lines) for lines in (base_lines, current_lines, fixed_lines)
    )
    added = current_count - base_count - ours_added
    removed = base_count - current_count - ours_removed
    fix_added = fixed_count - base_count
    fix_removed = base_count - fixed_count
    extra = (added - fix_added) or (removed - fix_removed)
    return next(iter(extra), None) if extra else None
