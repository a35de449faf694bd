"""A cache of results keyed by content, kept where ruff and mypy keep theirs.

``check`` and ``verify`` ask it before they analyse anything:

* ``check`` of a directory tree: the key is a hash of the texts the rules read (every file of
  ``sglang/srt/disaggregation``, and of ``sglang/srt/managers``, that passes the text
  prefilter, by path), the selected rule codes, and pdguard's fingerprint. A file that
  changes, appears or vanishes changes the key.
* ``verify`` of a git ref: the key holds the git ids of what the rules and fixes read
  (``sglang_names.READ_DIRS`` and ``READ_FILES``: the trees of ``sglang/srt/disaggregation``
  and ``sglang/srt/managers``, the env registry ``environ.py``), the blob ids of isort's
  settings files in the directories above them, where the package sits in the repository,
  the fixes and rule codes, and pdguard's fingerprint. Of a ref whose key hits, only the version
  file is read (for the report's ``sglang_version``). Refs with the same key in one run are
  analysed once.

pdguard's fingerprint is its version and a hash of its own source files, so a new pdguard (or an
edited checkout of it) never reads another's results. Where the cache lives:
``$PDGUARD_CACHE/results``, else ``$XDG_CACHE_HOME/pdguard/results``, else
``~/.cache/pdguard/results``; one JSON file per key. ``--no-cache`` (or ``PDGUARD_NO_CACHE=1``)
turns it off. Writes are atomic (a temporary file in the same directory, renamed), and an entry
that cannot be read, does not decode or does not carry its own key is a miss, never an error;
so is a cache directory that cannot be written.

Integrity: an entry is believed only if the cache directory and the entry's subdirectory are
owned by the user and writable by nobody else, and the entry carries the HMAC-SHA256 of its key
and value under the user's random key (``pdguard.state.secret_key``, in the state directory,
not beside the cache): an entry forged by someone who can write the cache, or copied from
another user's cache, is a miss.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import PdguardError
from .tree import CONFIG_SOURCES

if TYPE_CHECKING:
    import git

    from .checks import Finding, Project
    from .git_tree import GitTree, Resolved
    from .run import Run
    from .tree import SourceTree

# What the commands give and take (``commands.check.CheckResult``, ``commands.verify.RefReport``):
# this module does not import the commands, which import it.
CheckResult = Any
RefReport = Any

NO_CACHE_ENV = "PDGUARD_NO_CACHE"
FORMAT = 2  # the layout of an entry; bump it when it changes (2: entries carry a keyed hash)
_ENTRY_LIMIT = 64 << 20  # an entry larger than this is not read
_TREE = "\x00tree\x00"  # stands for a ref's display prefix ("v0.5.23:python/") in a stored note


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-cache`` for a command that uses the cache."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write pdguard's result cache (also PDGUARD_NO_CACHE=1)",
    )


def enabled(args: argparse.Namespace | None = None) -> bool:
    """Whether this run may use the cache: not ``--no-cache``, not ``PDGUARD_NO_CACHE``."""
    if args is not None and getattr(args, "no_cache", False):
        return False
    return os.environ.get(NO_CACHE_ENV, "") in ("", "0")


def cache_root() -> Path:
    """``$PDGUARD_CACHE/results``, else ``$XDG_CACHE_HOME/pdguard/results``, else
    ``~/.cache/pdguard/results`` (the releases ``vendor_sglang`` fetches sit beside it)."""
    override = os.environ.get("PDGUARD_CACHE")
    if override:
        return Path(override).expanduser() / "results"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pdguard" / "results"


@cache
def _source_hash() -> str:
    """A hash of pdguard's own ``.py`` files (rules, fixes, codemods included)."""
    import hashlib

    from .layout import source_dirs

    digest = hashlib.sha256()
    for package, top in source_dirs().items():
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = Path(dirpath, name)
                    rel = path.relative_to(top).as_posix()
                    digest.update(f"{package}/{rel}".encode() + b"\0")
                    digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def fingerprint() -> str:
    """pdguard's version and a hash of its source: a new pdguard reads no old entry."""
    import pdguard

    return f"{pdguard.__version__}:{_source_hash()}"


class ResultCache:
    """JSON values by key, one file each under ``root``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()
        self._secret: bytes | None = None
        self._made: set[Path] = set()  # directories this instance made or found private

    def key(self, kind: str, parts: Iterable[str]) -> str:
        import hashlib

        digest = hashlib.sha256(f"{FORMAT}\0{fingerprint()}\0{kind}".encode())
        for part in parts:
            digest.update(b"\0" + part.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _trusted(self, path: Path) -> bool:
        """Whether the entry at ``path`` may be believed at all: the cache directory and the
        entry's own are this user's and nobody else may write them, and the entry is this
        user's regular file (anyone who can write there could plant a pass)."""
        from .state import trusted

        try:
            return all(trusted(os.stat(d)) for d in (self.root, path.parent)) and (
                trusted(os.lstat(path)) and stat.S_ISREG(os.lstat(path).st_mode)
            )
        except OSError:
            return False

    def _mac(self, key: str, value: object) -> str | None:
        """The entry's keyed hash (HMAC-SHA256 with the user's key, ``state.secret_key``, read
        once an instance); None when there is no usable key (then nothing is read or
        written)."""
        import hashlib
        import hmac

        from .state import secret_key

        if self._secret is None:
            try:
                self._secret = secret_key()
            except OSError:
                return None
        secret = self._secret
        data = json.dumps({"key": key, "value": value}, sort_keys=True, separators=(",", ":"))
        return hmac.new(secret, data.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``; None when there is none or it cannot be used (also:
        the cache directory is not this user's alone, or the entry's keyed hash is wrong)."""
        import hmac

        path = self._path(key)
        if not self._trusted(path):
            return None
        try:
            from .tree import read_regular

            entry = json.loads(read_regular(path, _ENTRY_LIMIT))
        except (OSError, ValueError, PdguardError):  # missing, unreadable, not JSON, not UTF-8
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or "value" not in entry:
            return None
        mac = self._mac(key, entry["value"])
        if mac is None or not hmac.compare_digest(str(entry.get("mac", "")), mac):
            return None
        return entry["value"]

    def put(self, key: str, value: object) -> None:
        """Store ``value`` atomically; a cache that cannot be written is skipped."""
        self.put_all([(key, value)])

    def put_all(self, entries: Iterable[tuple[str, object]]) -> None:
        """Store each ``(key, value)``, each atomically (a temporary file renamed: no reader
        sees half an entry; not fsynced, as ruff's and mypy's caches are not: an entry lost
        in a crash is a miss); a cache that cannot be written is skipped."""
        import tempfile

        for key, value in entries:
            path = self._path(key)
            mac = self._mac(key, value)
            if mac is None:
                return
            data = json.dumps({"key": key, "value": value, "mac": mac}, separators=(",", ":"))
            try:
                for directory in (self.root, path.parent):  # made private: see _trusted
                    if directory not in self._made:
                        with contextlib.suppress(FileExistsError):
                            directory.mkdir(parents=True, mode=0o700)
                        self._made.add(directory)
                fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=path.parent)
                try:
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(data.encode())
                    os.replace(tmp, path)
                except BaseException:
                    os.unlink(tmp)
                    raise
            except OSError:
                return


# -- check ------------------------------------------------------------------------------------


def _finding_from(value: object) -> Finding:
    from .checks import Finding

    if not isinstance(value, list) or len(value) != 6:
        raise ValueError("not a finding")
    path, line, col, code, symbol, message = value
    if not (isinstance(line, int) and isinstance(col, int)):
        raise ValueError("not a finding")
    return Finding(str(path), line, col, str(code), str(symbol), str(message))


def check_tree_cached(
    tree: SourceTree,
    codes: Sequence[str],
    store: ResultCache | None,
    *,
    compute: Callable[[SourceTree, Sequence[str]], CheckResult],
    load: Callable[[SourceTree], Project],
    result: Callable[..., CheckResult],
) -> CheckResult:
    """``compute(tree, codes)`` (``check_tree``), or, from ``store`` (None: no cache), its
    findings for the same texts (``load``: ``load_project``) as ``result(tree, findings,
    suppressed, project)`` (``CheckResult``)."""
    if store is None:
        return compute(tree, codes)
    project = load(tree)  # read and decoded: the key is their texts
    parts = [",".join(codes)]
    for rel in sorted(project.texts):
        parts += [rel, project.texts[rel]]
    key = store.key("check", parts)
    value = store.get(key)
    if isinstance(value, dict):
        try:
            findings = [_finding_from(f) for f in value["findings"]]
            suppressed = int(value["suppressed"])
        except (KeyError, TypeError, ValueError):
            pass
        else:
            return result(tree, findings, suppressed, project)
    computed = compute(tree, codes)
    store.put(
        key,
        {
            "findings": [
                [f.path, f.line, f.col, f.code, f.symbol, f.message] for f in computed.findings
            ],
            "suppressed": computed.suppressed,
        },
    )
    return computed


# -- verify -----------------------------------------------------------------------------------


def ref_key(store: ResultCache, tree: GitTree) -> str:
    """What ``verify`` reads of ``tree``, by git object id (see the module docstring)."""
    from . import checks
    from .fixes import FIXES
    from .sglang_names import DISAGGREGATION_DIR, READ_DIRS, READ_FILES

    def object_id(path: str) -> str:
        found = tree.entry(tree.prefix + path)
        return found[1].hex() if found is not None else "-"

    parts = [
        tree.prefix,
        ",".join(f"{fix.name}={'+'.join(fix.rules)}" for fix in FIXES),
        ",".join(checks.CODES),
        *(f"{rel}={object_id(rel)}" for rel in (*READ_DIRS, *READ_FILES)),
    ]
    # isort's settings in each directory above the disaggregation directory (those inside it
    # are in its tree id; the managers directory has the same parents)
    directories = (tree.prefix + DISAGGREGATION_DIR).split("/")[:-1]
    for depth in range(len(directories) + 1):
        here = "/".join(directories[:depth])
        for name in CONFIG_SOURCES:
            found = tree.entry(f"{here}/{name}" if here else name)
            parts.append(f"{here}/{name}={found[1].hex() if found is not None else '-'}")
    return store.key("verify-ref", parts)


def _report_value(report: RefReport, prefix: str) -> dict[str, object]:
    notes = {name: note.replace(prefix, _TREE) for name, note in report.notes.items()}
    return {
        "fixes": report.fixes,
        "notes": notes,
        "findings": report.findings,
    }


def _report_from(
    value: object,
    ref: str,
    commit: str,
    prefix: str,
    version: str | None,
    make: Callable[..., RefReport],
) -> RefReport | None:
    if not isinstance(value, dict):
        return None
    try:
        fixes, notes, findings = value["fixes"], value["notes"], value["findings"]
        if not (
            isinstance(fixes, dict)
            and isinstance(notes, dict)
            and isinstance(findings, list)
            and all(isinstance(f, dict) for f in findings)
        ):
            return None
        notes = {str(k): str(v).replace(_TREE, prefix) for k, v in notes.items()}
        return make(ref, commit, version, dict(fixes), notes, list(findings))
    except (KeyError, TypeError, AttributeError):
        return None


def verify_trees_cached(
    repo: git.Repo,
    jobs: Sequence[tuple[str, Resolved | None]],
    store: ResultCache | None,
    *,
    compute: Callable[[list[tuple[str, Resolved | None]]], list[RefReport]],
    report: Callable[..., RefReport],
    first_miss: Callable[[], None] | None = None,
    run: Run | None = None,
) -> list[RefReport]:
    """``compute(jobs)`` (the reports of refs of distinct trees, in order: ``verify_git``
    groups refs by tree id first), asking ``store`` first: only the refs whose key misses are
    computed, and of refs with the same key (the same content: a release whose version file
    alone changed, ...) only the first; a hit is ``report(ref, commit, version, fixes, notes,
    findings)`` (``RefReport``). A ref that names no commit, or whose key cannot be read, is
    computed (its report is its error row) and never stored; so is a report that errs.
    ``first_miss()`` is called when the first ref misses (``verify`` forks its workers then).
    The keys' git objects are read in ``run`` (``verify``'s). The entries are written together
    once the misses are computed."""
    if store is None:
        return compute(list(jobs))
    import git

    from .git_tree import open_git_tree

    reports: dict[str, RefReport] = {}
    # key -> [(ref, commit, display prefix, version)], and the job computed for it
    pending: dict[str, list[tuple[str, str, str, str | None]]] = {}
    todo: list[tuple[str, Resolved | None]] = []
    keyed: dict[str, str] = {}  # a computed ref -> its key
    for ref, resolved in jobs:
        seen = None
        if resolved is not None:
            try:
                tree = open_git_tree(repo, ref, resolved, run)
                key = ref_key(store, tree)
                seen = (ref, resolved.commit, tree.display(""), tree.sglang_version())
            except (PdguardError, ValueError, OSError, git.GitError):  # the worker says why
                seen = None
        if seen is not None:
            hit = _report_from(store.get(key), *seen, report)
            if hit is not None:
                reports[ref] = hit
                continue
        if not todo and first_miss is not None:
            first_miss()
        if seen is None:
            todo.append((ref, resolved))
        elif key not in pending:
            pending[key] = [seen]
            keyed[ref] = key
            todo.append((ref, resolved))
        else:
            pending[key].append(seen)
    values: list[tuple[str, object]] = []
    again: list[str] = []  # refs with the key of a ref that erred: each its own error row
    for computed in compute(todo) if todo else []:
        reports[computed.ref] = computed
        key = keyed.get(computed.ref, "")
        if not key:
            continue
        if computed.error is not None:  # the error names its ref: each ref gets its own
            again += [seen[0] for seen in pending[key][1:]]
            continue
        value = _report_value(computed, pending[key][0][2])
        values.append((key, value))
        for seen in pending[key][1:]:
            reports[seen[0]] = _report_from(value, *seen, report)
    if again:
        resolved_of = dict(jobs)
        for computed in compute([(ref, resolved_of[ref]) for ref in again]):
            reports[computed.ref] = computed
    store.put_all(values)
    return [reports[ref] for ref, _ in jobs]
