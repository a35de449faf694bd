"""An SGLang tree read straight from a git commit's objects (GitPython): no checkout, no copy.

HEAD, the index, the working tree and the stash of the repository are never touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import PurePosixPath

import git

from .errors import TargetError
from .sglang_names import CHECKOUT_PREFIXES as PREFIXES
from .sglang_names import DISAGGREGATION_DIR
from .tree import CONFIG_SOURCES, SourceTree


class GitTree(SourceTree):
    def __init__(self, repo: git.Repo, ref: str, commit: git.Commit, prefix: str) -> None:
        self.repo = repo
        self.ref = ref
        self.commit = commit
        self.prefix = prefix

    @property
    def label(self) -> str:
        return f"{self.ref} ({self.commit.hexsha[:12]})"

    def display(self, rel: str) -> str:
        """Relative to the repository root (``python/sglang/srt/...``), as a checkout has it, so
        that reports and annotations map to files in the repository."""
        return f"{self.prefix}{rel}"

    def _object(self, path: str) -> git.Blob | git.Tree | None:
        try:
            return self.commit.tree / path.rstrip("/") if path else self.commit.tree
        except KeyError:
            return None

    def read_bytes(self, rel: str) -> bytes | None:
        blob = self._object(self.prefix + rel)
        if not isinstance(blob, git.Blob):
            return None
        try:
            return blob.data_stream.read()
        except ValueError as exc:  # GitPython: "SHA ... could not be resolved": not in the odb
            raise TargetError(
                f"{self.ref}:{self.prefix}{rel}: git object {blob.hexsha[:12]} is missing "
                "(a shallow or partial clone?)"
            ) from exc

    def python_files(self, rel_dir: str) -> list[str]:
        top = self._object(self.prefix + rel_dir)
        if not isinstance(top, git.Tree):
            return []
        start = len(self.prefix)
        paths = (os.fspath(item.path) for item in top.traverse() if isinstance(item, git.Blob))
        return sorted(path[start:] for path in paths if path.endswith(".py"))

    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        """From ``rel``'s directory up to the repository root, nearest first."""
        here = PurePosixPath(self.prefix + rel).parent
        while True:
            for name in CONFIG_SOURCES:
                path = str(here / name) if str(here) != "." else name
                blob = self._object(path)
                if isinstance(blob, git.Blob):
                    yield name, blob.data_stream.read(), f"{self.ref}:{path}"
            if str(here) in (".", ""):
                return
            here = here.parent


def open_git_tree(repo: git.Repo, ref: str) -> GitTree:
    """The SGLang tree at ``ref``: under ``python/`` (upstream's layout) or at the top."""
    try:
        target = repo.rev_parse(ref)
    except (git.BadName, ValueError) as exc:
        raise TargetError(f"{ref}: unknown ref in {repo.working_dir}") from exc
    while isinstance(target, git.TagObject):
        target = target.object
    if not isinstance(target, git.Commit):
        raise TargetError(f"{ref}: points at a {target.type}, not a commit")
    commit = target
    try:
        commit.tree  # noqa: B018 - a shallow clone's boundary may lack it
    except ValueError as exc:
        raise TargetError(f"{ref}: the commit's tree is missing (a shallow clone?)") from exc
    for prefix in PREFIXES:
        try:
            item = commit.tree / f"{prefix}{DISAGGREGATION_DIR}"
        except KeyError:
            continue
        if isinstance(item, git.Tree):
            return GitTree(repo, ref, commit, prefix)
    raise TargetError(
        f"{ref}: no SGLang tree at that ref (no python/{DISAGGREGATION_DIR}/ "
        f"or {DISAGGREGATION_DIR}/)"
    )


def open_repo(path: str) -> git.Repo:
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError) as exc:
        raise TargetError(f"{path}: not a git repository") from exc
