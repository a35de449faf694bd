"""``pdguard verify``: for each upstream ref (or released wheel), where does each fix stand?

Every ref is read from git objects (``GitTree``), every fix planned on an in-memory workspace:

* ``carried``: the property holds and pdguard's marker is there;
* ``upstream``: the property holds without pdguard's code;
* ``applicable``: it does not hold; ``apply`` succeeds in memory and ``check`` then passes;
* ``drifted``: it does not hold and ``apply`` cannot anchor (the note names what moved);
* ``not-applicable``: nothing to do in this release.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pdguard import cache, checks
from pdguard.checks import Finding
from pdguard.checks.project import Project

from .. import terminal
from ..errors import ConfigError, ParseError, PdguardError, TargetError, UsageError
from ..fixes import FIXES, Fix, Status
from ..run import Run, Settings, run_or_new
from ..tree import DirectoryTree, SourceTree

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    import git

    from ..git_tree import Resolved
    from ..workspace import Workspace
from .base import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    add_exit_zero,
    add_format,
    add_output_file,
    add_quiet,
    emit,
    github_escape,
    positive,
)
from .check import (
    SYNTAX_CODE,
    add_confirm,
    annotation,
    check_project,
    check_tree,
    error_line,
    finding_json,
    syntax_result,
    text_line,
)

NAME = "verify"
HELP = "say, per upstream ref or release, whether each fix is carried, upstream, ..."
DESCRIPTION = (
    "Verify refs of a git repository (read from git objects: no checkout) or released wheels."
)


def epilog() -> str:
    proofs = "\n".join(f"  {fix.name:<26}{', '.join(fix.rules)}" for fix in FIXES)
    return f"""\
statuses: carried (property holds, pdguard's marker there), upstream (holds without
pdguard), applicable (does not hold; apply works in memory and check then passes),
drifted (does not hold; apply cannot anchor: the note names what moved),
not-applicable.

the rules that prove each fix:
{proofs}

A ref that cannot be verified (unknown, a tag that points at a tree, objects missing
in a shallow clone, no SGLang tree, malformed isort settings) is an error row (status
`error` and the one-line reason) and the other refs are still reported.

Paths in notes and findings are relative to the repository root
(python/sglang/srt/...), as GitHub annotations need them.

exit codes: 0 every ref carried/upstream/not-applicable for every fix (or
--exit-zero); 1 any applicable or drifted; 2 error: any ref errored (each one is
also one `pdguard: error:` line on stderr), not a git repo, no tag matches.
"""


GOOD = frozenset({"carried", "upstream", "not-applicable"})
ERROR = "error"  # the status of every fix of a ref that could not be verified


@dataclass
class RefReport:
    ref: str
    commit: str | None
    sglang_version: str | None
    fixes: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    findings: list[dict[str, object]] = field(default_factory=list)
    error: str | None = None  # why this ref could not be verified (one line)
    # --pypi: the wheel verified, {"file", "sha256", "checked_against": "pin" | "index"}
    wheel: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return set(self.fixes.values()) <= GOOD

    @classmethod
    def errored(cls, ref: str, commit: str | None, why: str) -> RefReport:
        report = cls(ref, commit, None, error=" ".join(why.splitlines()))
        report.fixes = {fix.name: ERROR for fix in FIXES}
        return report

    @classmethod
    def does_not_parse(
        cls, tree: SourceTree, ref: str, commit: str | None, error: ParseError
    ) -> RefReport:
        """A ref one of whose files does not parse: an error row whose findings are that
        file's ``E999`` diagnostic, as ``check`` gives it (the path as verify names files);
        the error line is check's, after the ref."""
        [finding] = syntax_result(tree, error).errors
        path = repo_path(tree, finding.path)
        report = cls.errored(ref, commit, f"{ref}: {error_line(path, finding)}")
        report.findings = [finding_json(finding, path)]
        return report

    def syntax_errors(self) -> list[Finding]:
        """The ``E999`` diagnostics among the findings, their paths as verify names them."""
        keys = ("path", "line", "col", "code", "symbol", "message")
        return [
            Finding(**{key: f[key] for key in keys})  # type: ignore[arg-type]  # finding_json's
            for f in self.findings
            if f["code"] == SYNTAX_CODE
        ]

    def as_json(self) -> dict[str, object]:
        return asdict(self)


# What a fix's apply status means for a ref.
_VERIFY_STATUS = {
    Status.PRESENT: "carried",
    Status.UPSTREAM: "upstream",
    Status.NOT_APPLICABLE: "not-applicable",
    Status.REFUSED: "drifted",
    Status.APPLIED: "applicable",
}


def repo_path(tree: SourceTree, rel: str) -> str:
    """A file as verify names it: relative to the repository root for a ref
    (``python/sglang/srt/...``), to the wheel's root for a release (``sglang/srt/...``)."""
    return rel if isinstance(tree, DirectoryTree) else tree.display(rel)


def verify_tree(
    tree: SourceTree, ref: str, commit: str | None, run: Run | None = None
) -> RefReport:
    """All fixes on one in-memory workspace (they touch different files), then one check of
    the result for the rules of the fixes that applied; in ``run`` (a new one when None),
    which the refs a process verifies share."""
    from ..workspace import Workspace

    run = run_or_new(run)
    try:
        result = check_tree(tree, run=run)
    except ParseError as exc:
        return RefReport.does_not_parse(tree, ref, commit, exc)
    report = RefReport(ref, commit, tree.sglang_version())
    report.findings = [finding_json(f, repo_path(tree, f.path)) for f in result.findings]
    workspace = Workspace(tree, run=run)
    applied = _plan_fixes(tree, workspace, report)
    changed = {rel: new.text for rel, new in workspace.changed().items()} if applied else {}
    if applied:
        texts = dict(result.project.texts)
        texts.update(changed)
        _recheck(tree, Project(texts, run), applied, report)
    if run.confirm:
        _confirm(tree, changed, report, run)
    return report


def _confirm(tree: SourceTree, changed: dict[str, str], report: RefReport, run: Run) -> None:
    """Run the ref's code (patched where a fix applies) in simulate's sandbox: a PDG009
    finding (the scenarios disagree with the static verdict) is added to the ref's findings,
    and the fix that answers for that side is drifted, with both witnesses in its note."""
    from ..simulate import confirm

    checked = confirm.OverlayTree(tree, changed) if changed else tree
    from .check import check_tree as check

    result = check(checked, [*checks.STATIC_CODES, checks.CONFIRM_CODE], run)
    why = confirm.why_not_confirmed(result.project)
    if why is not None:
        report.notes["confirm"] = f"not confirmed: {why}"
    for finding in result.findings:
        if finding.code != checks.CONFIRM_CODE:
            continue
        report.findings.append(finding_json(finding, repo_path(tree, finding.path)))
        side = confirm.side_of(finding.path)
        fix = next((f for f in FIXES if side is not None and side.primary in f.rules), None)
        if fix is not None:
            report.fixes[fix.name] = "drifted"
            report.notes[fix.name] = f"{finding.code} {finding.message}"


def _plan_fixes(tree: SourceTree, workspace: Workspace, report: RefReport) -> list[Fix]:
    """Each fix's status and note into ``report``; the fixes that apply."""
    applied: list[Fix] = []
    for fix in FIXES:
        try:
            outcome = fix.plan(workspace)
        except ConfigError:
            raise  # the target's settings are broken: the ref is an error, not a drift
        except TargetError as exc:  # a file the fix needs vanished or does not parse
            report.fixes[fix.name], report.notes[fix.name] = "drifted", str(exc)
            continue
        report.fixes[fix.name] = _VERIFY_STATUS[outcome.status]
        note = outcome.note or ""
        if outcome.status is Status.REFUSED and outcome.where:
            note = f"{repo_path(tree, outcome.where)}: {note}"
        if note:
            report.notes[fix.name] = note
        if outcome.status is Status.APPLIED:
            applied.append(fix)
    return applied


def _recheck(tree: SourceTree, patched: Project, applied: list[Fix], report: RefReport) -> None:
    """A fix whose rules still report on the patched texts has drifted: apply anchors, but
    the property does not hold. The verdict is check's and apply's re-check's own
    (``check.check_project``: the same rules, the same suppressions)."""
    left = check_project(tree, patched, [code for fix in applied for code in fix.rules]).findings
    for fix in applied:
        mine = [f for f in left if f.code in fix.rules]
        if mine:
            report.fixes[fix.name] = "drifted"
            report.notes[fix.name] = "apply anchors but check still reports " + ", ".join(
                f"{f.code} {repo_path(tree, f.path)}:{f.line}" for f in mine
            )


def _verify_git_ref(
    repo_path: str, resolved: Resolved | None, ref: str, run: Run | None = None
) -> RefReport:
    """One ref's report (the commit and tree ``resolve_refs`` found for it, or None: it is
    resolved here); a ref that cannot be verified is an error row (``RefReport.error``)."""
    import git

    from ..git_tree import open_git_tree

    run = run_or_new(run)
    commit = None
    try:
        repo = _run_repo(repo_path, run)
        tree = open_git_tree(repo, ref, resolved, run)
        commit = tree.commit.hexsha
        return verify_tree(tree, ref, commit, run)
    except PdguardError as exc:
        return RefReport.errored(ref, commit, str(exc))
    except (git.GitError, ValueError, OSError) as exc:  # GitPython on a broken repository
        return RefReport.errored(ref, commit, f"{ref}: cannot read from git: {exc}")


def _run_repo(repo_path: str, run: Run) -> git.Repo:
    """The repository, opened once a run (``Run.repos``, closed with the run): its GitPython
    ``git cat-file`` processes serve every ref of the run. A worker's lane is a run made in
    the worker, so it never uses one inherited through a fork (their pipes are the parent's)."""
    from ..git_tree import open_repo

    repo = run.repos.get(repo_path)
    if repo is None:
        repo = run.repos[repo_path] = open_repo(repo_path)
    return repo


def _verify_release(version: str, run: Run | None = None) -> RefReport:
    """A published release: a pinned one (releases.toml's sha256), or any other version on the
    index (the wheel's sha256 checked against the one the index gives); the wheel is recorded
    in the report."""
    from pdguard.vendor_sglang import (
        UnknownReleaseError,
        fetch_release,
        fetch_unpinned,
        get_release,
        wheel_of,
    )

    from ..tree import open_tree

    try:
        try:
            get_release(version)
            path, checked = fetch_release(version), "pin"
        except UnknownReleaseError:
            path, checked = fetch_unpinned(version), "index"
    except PdguardError as exc:  # not published, not verified: no wheel to record
        return RefReport.errored(version, None, str(exc))
    try:
        report = verify_tree(open_tree(path), version, None, run)
    except PdguardError as exc:
        report = RefReport.errored(version, None, str(exc))
    wheel = wheel_of(path)
    if wheel is not None:
        report.wheel = {"file": wheel[0], "sha256": wheel[1], "checked_against": checked}
    return report


def verify_installed(run: Run | None = None) -> list[RefReport]:
    """``verify --installed``: the sglang this Python imports, as it is on disk (no ref, no
    wheel: what ``apply --installed`` would find)."""
    from ..tree import installed_tree

    tree = installed_tree()
    try:
        return [verify_tree(tree, tree.label, None, run)]
    except PdguardError as exc:
        return [RefReport.errored(tree.label, None, str(exc))]


def _source(args: argparse.Namespace) -> str:
    return "--installed" if args.installed else "--pypi"


def select_tags(repo_path: str, pattern: str) -> list[str]:
    from ..git_tree import open_repo

    repo = open_repo(repo_path)
    tags = sorted(t.name for t in repo.tags if fnmatch.fnmatchcase(t.name, pattern))
    if not tags:
        raise TargetError(f"{repo_path}: no tag matches {pattern!r}")
    return tags


def _progress(done: int, total: int) -> None:
    """A progress bar on stderr, when stderr is a terminal (a person is watching) and not -q."""
    if terminal.progress_wanted():
        bar = "#" * (20 * done // total)
        sys.stderr.write(f"\rverify [{bar:<20}] {done}/{total}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_parallel(
    worker: Callable[..., RefReport],
    jobs: Sequence[tuple[object, ...]],
    processes: int | None,
    workers: Workers | None = None,
    run: Run | None = None,
) -> list[RefReport]:
    """Run ``worker(*job, run=...)`` for every job in worker processes (``workers``, started
    already or not; by default a pool of its own); results in job order. Without workers the
    jobs share ``run`` (the command's; a new one when None); a worker's lane is a run of its
    own with ``run``'s settings (``Run.settings``).

    The jobs are put in version order, newest first (``v0.5.10`` next to ``v0.5.9``, by their
    last item): neighbouring releases share most files, and a process parses and transforms a
    file content once (``checks.project.parse_module``, ``Workspace.transform``). Each worker
    drains a *lane*: two workers share the whole order, one taking refs from the newest end,
    the other from the oldest, each ref the next one not yet taken, until they meet
    (``_lane``). So each process meets neighbouring releases one after another, and both end
    within one ref of each other, whatever each ref costs. More workers split the order into
    segments of two lanes (and one of a single lane for an odd worker), sized by their lanes."""
    run = run_or_new(run)
    if workers is None:
        with Workers(processes) as own:
            return run_parallel(worker, jobs, processes, own, run)
    if (len(jobs) == 1 and not workers.started) or workers.size == 1:
        reports = []  # the refs of this process share the command's run
        for n, job in enumerate(jobs, 1):
            reports.append(worker(*job, run=run))
            _progress(n, len(jobs))
        return reports
    pool, shared = workers.start()
    order = sorted(range(len(jobs)), key=lambda i: _natural(str(jobs[i][-1])), reverse=True)
    segments = _segments(len(order), min(len(jobs), workers.size))
    for n, (first, last, _) in enumerate(segments):
        shared[2 * n], shared[2 * n + 1] = first, last
    lanes = [(s, top) for s, (_, _, two) in enumerate(segments) for top in (True, False)[: 1 + two]]
    ordered = [jobs[i] for i in order]
    results: dict[int, RefReport] = {}
    try:
        with _ctrl_c_held():  # the workers may be forked here; a Ctrl-C waits until they are
            settings = run.settings()
            futures = [pool.submit(_lane, worker, ordered, s, top, settings) for s, top in lanes]
        pending: set[Future[list[tuple[int, RefReport]]]] = set(futures)
        while pending:
            _, pending = _wait(pending)
            _progress(shared[_DONE], len(jobs))
        for future in futures:
            for position, report in future.result():
                results[order[position]] = report
    except KeyboardInterrupt:  # pdguard exits 130; the workers stop after their ref
        shared[_STOP] = 1
        raise
    return [results[i] for i in range(len(jobs))]


# run_parallel's shared integers: per segment the next position from its top and from its
# bottom, then these two
_DONE = -2  # refs done
_STOP = -1  # set on Ctrl-C: the lanes stop after their ref


class Workers:
    """``verify``'s worker processes, forked when first needed (``start``), or early
    (``warm``): ``verify`` warms them when the first ref misses the result cache, so that they
    import LibCST and the codemods while it still reads the other refs' cache keys."""

    def __init__(self, processes: int | None) -> None:
        self.size = min(processes or os.cpu_count() or 1, MAX_JOBS)
        self._pool: ProcessPoolExecutor | None = None
        self._shared: Any = None

    @property
    def started(self) -> bool:
        return self._pool is not None

    def start(self) -> tuple[ProcessPoolExecutor, Any]:
        """The pool (forked now if it was not) and the integers its lanes share."""
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._shared = multiprocessing.Array("i", [0] * (2 * (self.size // 2 + 1) + 2))
            with _ctrl_c_held():  # the workers are forked here; a Ctrl-C waits until they are
                self._pool = ProcessPoolExecutor(
                    max_workers=self.size, initializer=_start_worker, initargs=(self._shared,)
                )
        return self._pool, self._shared

    def warm(self) -> None:
        """Fork the workers now, each importing what analysing a ref imports."""
        if self.size > 1 and self._pool is None:
            pool, _ = self.start()
            with _ctrl_c_held():
                for _ in range(self.size):
                    pool.submit(_warm_up)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self._pool is not None:  # after Ctrl-C, the lanes not started never run
            self._pool.shutdown(wait=kind is None, cancel_futures=kind is not None)


def _warm_up() -> None:
    import importlib
    import pkgutil

    import isort  # noqa: F401  (the import fixes place their imports with it)
    import libcst  # noqa: F401

    import pdguard.codemods as codemods

    for module in pkgutil.iter_modules(codemods.__path__, "pdguard.codemods."):
        importlib.import_module(module.name)
    importlib.import_module("pdguard.workspace")


def _segments(count: int, workers: int) -> list[tuple[int, int, bool]]:
    """Positions ``0 .. count - 1`` cut into contiguous segments, one for every two workers
    (and one for an odd worker out), sized by how many workers drain each: (first, last,
    drained from both ends)."""
    lanes = [2] * (workers // 2) + [1] * (workers % 2)
    segments = []
    start = 0
    for n, width in enumerate(lanes):
        taken = sum(lanes[: n + 1])
        end = count * taken // workers
        segments.append((start, end - 1, width == 2))
        start = end
    return segments


# The worker's view of run_parallel's shared positions, handed in by the pool's initializer:
# multiprocessing's shared integers pass to a process only as it is forked, never as an
# argument of a submitted job, so this is process state by nature. It holds no cache and no
# answer; it is set once in each worker of one ``Workers`` pool (made for one run), and never
# in the main process.
_SHARED: list[Any] = []


def _start_worker(shared: Any) -> None:
    _ignore_ctrl_c()
    _SHARED[:] = [shared]


def _lane(
    worker: Callable[..., RefReport],
    jobs: list[tuple[object, ...]],
    segment: int,
    top: bool,
    settings: Settings,
) -> list[tuple[int, RefReport]]:
    """Run ``worker`` on the jobs of ``segment`` not yet taken, one after another, from its
    top (``top``) or its bottom, until none is left (or Ctrl-C stopped the run)."""
    shared = _SHARED[0]
    done: list[tuple[int, RefReport]] = []
    with Run.of(settings) as run:  # the lane's refs, met one after another, share one run
        while not shared[_STOP]:
            with shared.get_lock():
                low, high = shared[2 * segment], shared[2 * segment + 1]
                if low > high:
                    break
                position = low if top else high
                shared[2 * segment + (0 if top else 1)] = low + 1 if top else high - 1
            done.append((position, worker(*jobs[position], run=run)))
            with shared.get_lock():
                shared[_DONE] += 1
    return done


def _natural(name: str) -> list[tuple[int, int | str]]:
    """``v0.5.10`` after ``v0.5.9``: digit runs compare as numbers."""
    import re

    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)]


def _ignore_ctrl_c() -> None:
    """Workers leave Ctrl-C to the main process: one quiet exit 130, no worker tracebacks.
    A worker is forked with Ctrl-C held back (``_ctrl_c_held``), so one that reaches the
    process group while it starts is dropped here, not raised inside the fork."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back in this thread (and in the processes it forks) for the block; one
    that arrives meanwhile is raised when the block ends."""
    import signal

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _wait(
    pending: set[Future[list[tuple[int, RefReport]]]],
) -> tuple[set[Future[list[tuple[int, RefReport]]]], set[Future[list[tuple[int, RefReport]]]]]:
    """The lanes done and those still running, after a tenth of a second at most when a
    progress bar is drawn (it shows each ref done), else after the first lane ends."""
    from concurrent.futures import FIRST_COMPLETED, wait

    done, still = wait(
        pending, timeout=0.1 if terminal.progress_wanted() else None, return_when=FIRST_COMPLETED
    )
    return done, still


def verify_git(
    repo_path: str,
    refs: Sequence[str],
    processes: int | None = None,
    workers: Workers | None = None,
    store: cache.ResultCache | None = None,
    run: Run | None = None,
) -> list[RefReport]:
    """The refs' reports, in order, in ``run`` (the command's; a new one when None). What a
    run does scales with distinct trees, not refs: the
    refs are resolved to commit and tree ids by one git process (``resolve_refs``), and refs
    whose commits have the same tree (1,000 tags on one commit, a tag and the branch at it, a
    release re-tagged) are verified once, with the result cache (``store``) or without: the
    report is a function of the tree, given to each ref with its own name and commit."""
    from ..git_tree import open_repo, resolve_refs

    run = run_or_new(run)
    repo = open_repo(repo_path)  # not a git repository: exit 2 before any worker starts
    resolved = resolve_refs(repo, refs)
    trees: dict[str, list[str]] = {}  # tree id -> its refs, in order
    jobs: list[tuple[str, Resolved | None]] = []  # the first ref of each tree, and the rest
    for ref in dict.fromkeys(refs):
        found = resolved[ref]
        if found is None:
            jobs.append((ref, None))  # unknown, not a commit, objects missing: its own row
        elif found.tree not in trees:
            trees[found.tree] = [ref]
            jobs.append((ref, found))
        else:
            trees[found.tree].append(ref)

    def analyse(todo: list[tuple[str, Resolved | None]]) -> list[RefReport]:
        return analyse_git(repo_path, todo, processes, workers, run)

    done = cache.verify_trees_cached(
        repo,
        jobs,
        store,
        compute=analyse,
        report=RefReport,
        # one tree to analyse: the workers are not forked, it is analysed here
        first_miss=workers.warm if workers is not None and len(jobs) > 1 else None,
        run=run,
    )
    by_ref = {report.ref: report for report in done}
    again: list[tuple[str, Resolved | None]] = []
    for same in trees.values():
        first = by_ref[same[0]]
        for ref in same[1:]:
            found = resolved[ref]
            assert found is not None  # grouped by its tree id
            if first.error is None:
                by_ref[ref] = replace(first, ref=ref, commit=found.commit)
            else:  # the error names the first ref: each ref gets its own
                again.append((ref, found))
    if again:
        by_ref.update((report.ref, report) for report in analyse(again))
    return [by_ref[ref] for ref in refs]


def analyse_git(
    repo_path: str,
    jobs: Sequence[tuple[str, Resolved | None]],
    processes: int | None = None,
    workers: Workers | None = None,
    run: Run | None = None,
) -> list[RefReport]:
    """Each ``(ref, resolved)``'s report, computed (no cache), in workers (``run_parallel``)."""
    work = [(repo_path, resolved, ref) for ref, resolved in jobs]
    return run_parallel(_verify_git_ref, work, processes, workers, run)


def verify_pypi(
    versions: Sequence[str], processes: int | None = None, run: Run | None = None
) -> list[RefReport]:
    return run_parallel(_verify_release, [(v,) for v in versions], processes, run=run)


# -- output ---------------------------------------------------------------------------------


def text(reports: Sequence[RefReport]) -> str:
    names = [fix.name for fix in FIXES]
    header = ["REF", "COMMIT", "VERSION", *names, "FINDINGS"]
    rows = [
        [
            r.ref,
            (r.commit or "-")[:12],
            r.sglang_version or "-",
            *(r.fixes.get(n, "-") for n in names),
            str(len(r.findings)),
        ]
        for r in reports
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    for r in reports:
        syntax = r.syntax_errors()
        for f in syntax:  # check's text line, after the ref
            lines.append(f"{r.ref}: {text_line(f.path, f)}")
        if r.error is not None and not syntax:
            lines.append(f"{r.ref}: error: {r.error}")
        if r.wheel is not None:
            against = "releases.toml's pin" if r.wheel["checked_against"] == "pin" else "the index"
            lines.append(f"{r.ref}: {r.wheel['file']} sha256 {r.wheel['sha256']} ({against})")
        for name, note in r.notes.items():
            if r.fixes.get(name) not in ("carried", "upstream"):
                lines.append(f"{r.ref}: {name}: {note}")
    return "\n".join(lines)


def as_json(reports: Sequence[RefReport]) -> str:
    return json.dumps([r.as_json() for r in reports], indent=2)


def github(reports: Sequence[RefReport]) -> str:
    lines: list[str] = []
    for r in reports:
        if r.error is not None:
            syntax = r.syntax_errors()  # check's annotation; else the ref's error
            title = github_escape(f"pdguard verify {r.ref}", prop=True)
            lines.extend(
                [annotation(f.path, f) for f in syntax]
                or [f"::error title={title}::{github_escape(f'error: {r.error}')}"]
            )
            continue
        for name, status in r.fixes.items():
            if status in ("applicable", "drifted"):
                level = "error" if status == "drifted" else "warning"
                title = github_escape(f"pdguard verify {r.ref}", prop=True)
                message = github_escape(f"{name} {status}: {r.notes.get(name, '')}")
                lines.append(f"::{level} title={title}::{message}")
    return "\n".join(lines)


FORMATS = {"text": text, "json": as_json, "github": github}


# -- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--repo", metavar="PATH", help="a git repository holding SGLang (python/sglang/...)"
    )
    source.add_argument(
        "--pypi",
        nargs="+",
        metavar="VERSION",
        help="published releases instead: a pinned one (releases.toml's sha256) or any other "
        "on the index (its wheel's sha256 checked against the index's); cached",
    )
    source.add_argument(
        "--installed",
        action="store_true",
        help="the sglang package this Python would import (found without importing it), its "
        "files as they are on disk",
    )
    parser.add_argument(
        "--ref", action="append", default=[], help="a ref to verify (repeat; with --repo)"
    )
    parser.add_argument(
        "--tags", metavar="PATTERN", help="every tag matching, e.g. 'v0.5.*' (with --repo)"
    )
    add_format(parser, FORMATS)
    add_output_file(parser, "verify.json")
    add_exit_zero(parser, "a fix is applicable or drifted")
    add_quiet(parser, "the progress bar")
    parser.add_argument(
        "--jobs",
        type=jobs,
        default=None,
        help=f"worker processes, 1 to {MAX_JOBS} (default: CPUs, at most {MAX_JOBS})",
    )
    add_confirm(parser, default=False)
    cache.add_argument(parser)


MAX_JOBS = 64  # each worker holds its own parsed trees (~150 MB on a release); more never helps


def jobs(value: str) -> int:
    """An argparse type: ``--jobs``, 1 to ``MAX_JOBS``."""
    number = positive(value)
    if number > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"at most {MAX_JOBS} worker processes, got {value!r}")
    return number


def run(args: argparse.Namespace) -> int:
    # the command's one run (its workers' lanes take its settings)
    with terminal.quiet(args.quiet), Run(confirm=args.confirm) as this_run:
        return _run(args, this_run)


def _run(args: argparse.Namespace, run: Run) -> int:
    if args.repo:
        refs = list(args.ref)
        if args.tags:
            refs += [t for t in select_tags(args.repo, args.tags) if t not in refs]
        if not refs:
            raise UsageError("verify --repo needs --ref REF or --tags PATTERN")
        # a cached report was not confirmed: --confirm computes every ref
        store = cache.ResultCache() if cache.enabled(args) and not args.confirm else None
        with Workers(args.jobs) as workers:
            reports = verify_git(args.repo, refs, args.jobs, workers, store, run)
    else:
        if args.ref or args.tags:
            raise UsageError(f"--ref/--tags go with --repo, not {_source(args)}")
        reports = (
            verify_installed(run) if args.installed else verify_pypi(args.pypi, args.jobs, run)
        )
    emit(FORMATS[args.format](reports), args.output_file)
    errored = [r for r in reports if r.error is not None]
    for report in errored:
        print(f"pdguard: error: {report.error}", file=sys.stderr)
    if errored:
        return EXIT_ERROR
    return EXIT_OK if args.exit_zero or all(r.ok for r in reports) else EXIT_CHANGES
