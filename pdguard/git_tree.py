"""An SGLang tree read straight from a git commit's objects (GitPython): no checkout, no copy.

HEAD, the index, the working tree and the stash of the repository are never touched.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath
from typing import NamedTuple

import git
from git.objects.fun import tree_entries_from_data

from .errors import ConfigError, TargetError
from .git_objects import ObjectError, cat_file, header_fields
from .run import Run, run_or_new
from .sglang_names import CHECKOUT_PREFIXES as PREFIXES
from .sglang_names import DISAGGREGATION_DIR
from .tree import CONFIG_SOURCES, SOURCE_LIMIT, SourceTree, too_large

_TREE_MODE = 0o040000
_SUBMODULE_MODE = 0o160000
_SYMLINK_MODE = 0o120000
_TAG_DEPTH = 16
_KIND = {_SUBMODULE_MODE: "a submodule (gitlink)", _SYMLINK_MODE: "a symlink"}


def _why(exc: Exception) -> str:
    """What a failed object read says after the object's id."""
    missing = "could not be resolved" in str(exc)
    why = "is missing (a shallow or partial clone?)" if missing else "cannot be read"
    return f"{why}: {' '.join(str(exc).split())[:200]}"


def _is_blob(mode: int) -> bool:
    return mode not in (_TREE_MODE, _SUBMODULE_MODE, _SYMLINK_MODE)


class GitTree(SourceTree):
    """Paths are resolved through the commit's tree objects, each read once a run (an
    ``ls-tree`` of the path's directories, without GitPython's object per entry). Git objects
    are immutable: a tree's entries and a blob's bytes, by object id, are kept in ``run``
    (``Run.git_trees``, ``Run.git_blobs``) for every ref it reads (``verify`` reads
    neighbouring releases, which share most of them)."""

    def __init__(
        self,
        repo: git.Repo,
        ref: str,
        commit: git.Commit,
        tree_id: bytes,
        prefix: str,
        run: Run | None = None,
    ) -> None:
        self.run = run_or_new(run)
        self.repo = repo
        self.ref = ref
        self.commit = commit
        self.tree_id = tree_id  # the commit's root tree, read with pdguard's reader
        self.prefix = prefix
        self._resolved: dict[str, tuple[int, bytes] | None] = {}

    @property
    def label(self) -> str:
        return f"{self.ref} ({self.commit.hexsha[:12]})"

    def sglang_version(self) -> str | None:
        """As for any tree, or, when the commit holds no version file (setuptools-scm's
        ``_version.py`` is written only into a build), from its tags (``git_version``)."""
        version = super().sglang_version()
        if version is not None:
            return version
        from pathlib import Path

        from .git_version import tag_version

        return tag_version(Path(self.repo.git_dir), self.commit.hexsha)

    def display(self, rel: str) -> str:
        """Relative to the repository root (``python/sglang/srt/...``), as a checkout has it, so
        that reports and annotations map to files in the repository."""
        return f"{self.prefix}{rel}"

    def _entries(self, binsha: bytes, path: str = "") -> dict[str, tuple[int, bytes]]:
        entries = self.run.git_trees.get(binsha)
        if entries is None:
            data = self._read(binsha, path)
            try:
                entries = {name: (mode, sha) for sha, mode, name in tree_entries_from_data(data)}
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                raise self._broken(binsha, path, f"not a valid tree object ({exc})") from exc
            self.run.git_trees[binsha] = entries
        return entries

    def _read(self, binsha: bytes, path: str) -> bytes:
        """An object's bytes; any failure of git (a missing or corrupt object, a header that
        states a size the object does not have, a git process that died or stalled) is a
        ``TargetError`` naming the ref, the path and the object."""
        try:
            return cat_file(str(self.repo.git_dir)).read(binsha.hex())[1]
        except (ObjectError, OSError, ValueError) as exc:
            raise self._broken(binsha, path, _why(exc)) from exc

    def _broken(self, binsha: bytes, path: str, why: str) -> TargetError:
        return TargetError(f"{self.ref}:{path or '.'}: git object {binsha.hex()} {why}")

    def entry(self, path: str) -> tuple[int, bytes] | None:
        """(mode, object id) of ``path`` (from the repository root) at this commit; None where
        nothing is there."""
        path = path.rstrip("/")
        if path in self._resolved:
            return self._resolved[path]
        found: tuple[int, bytes] | None = (_TREE_MODE, self.tree_id)
        if path:
            parent, _, name = path.rpartition("/")
            above = self.entry(parent)
            found = (
                self._entries(above[1], parent).get(name)
                if above is not None and above[0] == _TREE_MODE
                else None
            )
        self._resolved[path] = found
        return found

    def read_bytes(self, rel: str) -> bytes | None:
        found = self.entry(self.prefix + rel)
        if found is None or found[0] == _TREE_MODE:
            return None
        if not _is_blob(found[0]):
            raise self._not_followed(self.prefix + rel, found[0])
        data = self._blob(found[1], f"{self.prefix}{rel}")
        if len(data) > SOURCE_LIMIT:
            raise too_large(f"{self.ref}:{self.prefix}{rel}", len(data))
        return data

    def _not_followed(self, path: str, mode: int) -> TargetError:
        """A symlink or a submodule where pdguard reads: git trees are read from objects, so
        neither can be followed; the ref is an error, never a pass."""
        return TargetError(
            f"{self.ref}:{path}: is {_KIND[mode]} in git; pdguard reads only files and "
            "directories of the commit's tree, so it cannot verify this ref"
        )

    def _blob(self, binsha: bytes, path: str) -> bytes:
        data = self.run.git_blobs.get(binsha)
        if data is None:
            data = self.run.git_blobs.put(binsha, self._read(binsha, path))
        return data

    def python_files(self, rel_dir: str) -> list[str]:
        top = self.entry(self.prefix + rel_dir)
        if top is None or top[0] != _TREE_MODE:
            return []
        base = f"{rel_dir.rstrip('/')}/" if rel_dir.rstrip("/") else ""
        top_path = self.prefix + rel_dir.rstrip("/")
        return sorted(base + path for path in self._files(top[1], top_path) if path.endswith(".py"))

    def _files(self, binsha: bytes, path: str) -> Iterator[str]:
        """The paths of the blobs below a tree, relative to it. A submodule, or a symlink that
        may stand for a Python file or a directory (a name ending ``.py`` or with no suffix),
        is refused (``TargetError``): its files would count for the verdict on disk."""
        for name, (mode, sha) in self._entries(binsha, path).items():
            if mode == _TREE_MODE:
                yield from (f"{name}/{sub}" for sub in self._files(sha, f"{path}/{name}"))
            elif _is_blob(mode):
                yield name
            elif mode == _SUBMODULE_MODE or name.endswith(".py") or "." not in name:
                raise self._not_followed(f"{path}/{name}", mode)

    def config_files(self, rel: str) -> Iterator[tuple[str, bytes, str]]:
        """From ``rel``'s directory up to the repository root, nearest first."""
        here = PurePosixPath(self.prefix + rel).parent
        while True:
            for name in CONFIG_SOURCES:
                path = str(here / name) if str(here) != "." else name
                found = self.entry(path)
                if found is None or found[0] == _TREE_MODE:
                    continue
                if not _is_blob(found[0]):  # isort would read it in a checkout
                    raise ConfigError(str(self._not_followed(path, found[0])))
                yield name, self._blob(found[1], path), f"{self.ref}:{path}"
            if str(here) in (".", ""):
                return
            here = here.parent


class Resolved(NamedTuple):
    """What a ref names, by object id: the commit and its tree (``resolve_refs``)."""

    commit: str
    tree: str


def resolve_refs(repo: git.Repo, refs: Sequence[str]) -> dict[str, Resolved | None]:
    """Each ref's commit and tree id, asked of one ``git cat-file --batch-check`` for all of
    them (not one ``rev_parse`` and commit read each: 300 tags cost one git process). None for
    a ref that names no commit (unknown, a tree or a blob, objects missing): ``open_git_tree``
    then says why. Every ref is None when git cannot be asked."""
    asked = [ref for ref in dict.fromkeys(refs) if ref and "\n" not in ref and "\r" not in ref]
    resolved: dict[str, Resolved | None] = dict.fromkeys(refs)
    if not asked:
        return resolved
    lines = "".join(f"{ref}^{{commit}}\n{ref}^{{commit}}^{{tree}}\n" for ref in asked)
    try:
        done = subprocess.run(
            [
                git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git",
                f"--git-dir={repo.git_dir}",
                "cat-file",
                "--batch-check=%(objectname) %(objecttype)",
            ],
            input=lines.encode("utf-8", "surrogateescape"),
            capture_output=True,
            check=False,
        )
    except OSError:
        return resolved
    answers = done.stdout.decode("utf-8", "surrogateescape").splitlines()
    if done.returncode != 0 or len(answers) != 2 * len(asked):
        return resolved
    for n, ref in enumerate(asked):
        commit, tree = answers[2 * n].split(" "), answers[2 * n + 1].split(" ")
        if commit[-1] == "commit" and tree[-1] == "tree" and len(commit) == len(tree) == 2:
            resolved[ref] = Resolved(commit[0], tree[0])
    return resolved


def open_git_tree(
    repo: git.Repo, ref: str, resolved: Resolved | None = None, run: Run | None = None
) -> GitTree:
    """The SGLang tree at ``ref``: under ``python/`` (upstream's layout) or at the top. With
    ``resolved`` (``resolve_refs``), the tree of that commit, read from its tree id. Its git
    objects are kept in ``run`` (a new one when None)."""
    run = run_or_new(run)
    if resolved is not None:
        commit = git.Commit(repo, bytes.fromhex(resolved.commit))
        tree_id = bytes.fromhex(resolved.tree)
    else:
        commit, tree_id = _commit_of(repo, ref)
    for prefix in PREFIXES:
        tree = GitTree(repo, ref, commit, tree_id, prefix, run)
        found = tree.entry(f"{prefix}{DISAGGREGATION_DIR}")  # trees read once a run
        if found is not None and found[0] == _TREE_MODE:
            return tree
    raise TargetError(
        f"{ref}: no SGLang tree at that ref (no python/{DISAGGREGATION_DIR}/ "
        f"or {DISAGGREGATION_DIR}/)"
    )


def _commit_of(repo: git.Repo, ref: str) -> tuple[git.Commit, bytes]:
    """The commit ``ref`` names and its tree id, tags peeled with pdguard's own reader (a
    lying object header is an error, never a hang)."""
    try:
        target = repo.rev_parse(ref)
    except (git.BadName, ValueError) as exc:
        raise TargetError(f"{ref}: unknown ref in {repo.working_dir}") from exc
    reader = cat_file(str(repo.git_dir))
    sha = target.hexsha
    try:
        kind, data = reader.read(sha)
        for _ in range(_TAG_DEPTH):  # a tag of a tag ... of a commit
            if kind != "tag":
                break
            sha = header_fields(data)[b"object"].decode()
            kind, data = reader.read(sha)
        if kind == "commit":
            tree_id = bytes.fromhex(header_fields(data)[b"tree"].decode())
    except (ObjectError, OSError, ValueError, KeyError) as exc:
        raise TargetError(f"{ref}: git object {sha} {_why(exc)}") from exc
    if kind != "commit":
        raise TargetError(f"{ref}: points at a {kind}, not a commit")
    return repo.commit(sha), tree_id


def open_repo(path: str) -> git.Repo:
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError) as exc:
        raise TargetError(f"{path}: not a git repository") from exc
