"""``pdguard apply``: run every fix on a tree, check the result, and (unless asked not to) write
it. ``plan`` is also what ``verify``, ``carry`` and ``demo`` run."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..errors import ParseError, RefusedError, TargetError, UsageError
from ..fixes import FIXES, Fix, Outcome, Status
from ..run import Run
from ..sglang_names import DISAGGREGATION_DIR, INFLIGHT_TIMEOUT_ENV
from ..source_file import SourceFile
from ..tree import DirectoryTree, SourceTree

if TYPE_CHECKING:
    from ..checks import Finding

from .base import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    add_format,
    add_output_file,
    add_quiet,
    add_target,
    emit,
    outside_cwd,
    shown_path,
    target_tree,
)
from .check import (
    CheckResult,
    add_confirm,
    error_line,
    finding_json,
    syntax_result,
    text_line,
)

NAME = "apply"
HELP = "apply the fixes to an SGLang tree"
DESCRIPTION = "Apply pdguard's fixes to an SGLang tree."


def epilog() -> str:
    fixes = "\n".join(f"  {fix.name:<26}{fix.summary}" for fix in FIXES)
    return f"""\
fixes:
{fixes}

TARGET may be a checkout root (python/sglang/...), an `sglang` package directory, or
any directory holding {DISAGGREGATION_DIR}.

statuses: {", ".join(s.value for s in Status)}, {WOULD_APPLY}
  (present: pdguard's fix is already there; upstream: the release already does it;
  refused: the note says why, and nothing is written; {WOULD_APPLY}: the fix is planned
  but nothing was written: --check, --diff, or another fix was refused)

Paths in the report and the diff are relative to the current directory. For a tree outside
it, the report names files by absolute path and the diff relative to the tree's root (said
on stderr): `git apply` and `patch -p1` work there. Never `../`.
--diff prints a unified diff on stdout and the report on stderr (text), or the diff
inside the JSON report (--format json: key "diff"). Like ruff, it exits 1 when there
is a diff.

Before planning, apply repairs what a run killed mid-write left in the tree (its
journal, see docs/apply.md); what it repaired is printed on stderr.

exit codes: 0 done or nothing to do; 1 with --check or --diff when a change is needed;
2 error (not SGLang, a file that does not parse, a refused fix, an --output-file that
cannot be written): nothing is written.

environment of the patched SGLang:
  {INFLIGHT_TIMEOUT_ENV}  seconds in the inflight queue before a
      request is failed (default 300; 0 turns the deadline off)
"""


# -- the plan -------------------------------------------------------------------------------


def shown_target(tree: SourceTree) -> str:
    """The tree the report is about, named as its files are (``shown_path``, as ruff names
    paths): relative to the current directory when below it (``.`` for it), else absolute;
    never the target as typed (``../tree``). A tree not on disk: its label."""
    return shown_path(tree.root) if isinstance(tree, DirectoryTree) else tree.label


@dataclass
class ApplyResult:
    tree: SourceTree
    sglang_version: str | None
    outcomes: dict[str, Outcome]
    originals: dict[str, SourceFile] = field(default_factory=dict)
    changes: dict[str, SourceFile] = field(default_factory=dict)

    @property
    def refused(self) -> dict[str, Outcome]:
        return {n: o for n, o in self.outcomes.items() if o.status is Status.REFUSED}

    def refusal(self) -> str:
        """The refusal line of the first refused fix."""
        name, outcome = next(iter(self.refused.items()))
        return outcome.refusal(name, self.tree)

    @property
    def target(self) -> str:
        """The target as the reports name it (``shown_target``)."""
        return shown_target(self.tree)

    def shown(self, rel: str) -> str:
        """File ``rel`` as the report names it: relative to the current directory for a tree on
        disk (``python/sglang/srt/...`` at a checkout's root), as the tree says otherwise."""
        if isinstance(self.tree, DirectoryTree):
            return shown_path(self.tree.base / rel)
        return self.tree.display(rel)

    def diff_path(self, rel: str) -> str:
        """File ``rel`` in the diff: relative to the current directory, or to the tree's root
        (``paths_from``) for a tree outside it; never ``../`` (git apply refuses it)."""
        if isinstance(self.tree, DirectoryTree):
            return shown_path(self.tree.base / rel, self.tree.root)
        return self.tree.display(rel)

    def paths_from(self) -> Path | None:
        """The directory the report's and the diff's paths are relative to when it is not the
        current one: the tree's root, for a tree outside the current directory."""
        if isinstance(self.tree, DirectoryTree) and outside_cwd(self.tree.root):
            return Path(os.path.realpath(self.tree.root))
        return None

    def diff(self) -> str:
        chunks: list[str] = []
        for rel, new in self.changes.items():
            shown = self.diff_path(rel)
            chunks.extend(
                difflib.unified_diff(
                    self.originals[rel].text.splitlines(keepends=True),
                    new.text.splitlines(keepends=True),
                    fromfile=f"a/{shown}",
                    tofile=f"b/{shown}",
                )
            )
        return "".join(chunks)


def plan(
    tree: SourceTree,
    fixes: tuple[Fix, ...] = FIXES,
    left_out: Mapping[str, frozenset[str]] | None = None,
    *,
    markers: bool = True,
    confirm: bool = False,
    run: Run | None = None,
) -> ApplyResult:
    """Every fix's outcome and every file's new content; nothing is written. ``markers``: whether
    the new code carries the fixes' marker comments (``Workspace``).

    Fixes not in ``fixes`` are ``skipped``. A fix reports ``applied`` or ``present`` only when
    the rules that prove it, run as ``pdguard check`` runs them, pass on the result; otherwise
    it is refused and its note names what check still reports. A refusal of any fix keeps
    every file as it is (``changes`` is then empty). ``left_out``: classes left out of a fix
    (``--ignore FIX:Class``); check's findings on them are not held against the fixes. With
    ``confirm``, where something changes, the re-check also runs the patched code in
    simulate's sandbox (PDG009, as ``check --confirm``): a fix whose side the scenarios still
    show unbounded is refused too. ``run``: the command's ``Run`` (a new one when None), whose
    parsed trees and models the fixes and the re-check share."""
    from ..checks.project import parse_module
    from ..workspace import Workspace

    workspace = Workspace(tree, markers=markers, run=run)
    workspace.left_out = dict(left_out or {})
    chosen = {fix.name for fix in fixes}
    outcomes = {
        fix.name: fix.plan(workspace) if fix.name in chosen else Outcome(Status.SKIPPED, _LEFT_OUT)
        for fix in FIXES
    }
    result = ApplyResult(tree, tree.sglang_version(), outcomes, dict(workspace.originals))
    if result.refused:
        return result
    changes = workspace.changed()
    for rel, new in changes.items():
        try:  # parsed once per text: the re-check reads the same tree
            compile(parse_module(new.text, rel, workspace.run), rel, "exec", dont_inherit=True)
        except SyntaxError as exc:  # a bug in pdguard: never write it
            name = next(n for n, o in outcomes.items() if o.status is Status.APPLIED)
            outcomes[name] = Outcome(
                Status.REFUSED, f"internal error: the patched file does not compile: {exc}", rel
            )
            return result
    proven = [f for f in fixes if outcomes[f.name].status in _PROVEN]
    excused = frozenset().union(*workspace.left_out.values())
    _recheck(
        tree,
        changes,
        proven,
        outcomes,
        excused,
        confirm=confirm and bool(changes),
        run=workspace.run,
    )
    if not result.refused:
        result.changes = changes
    return result


_LEFT_OUT = "left out by --select/--ignore"
# The statuses that claim the property holds: check must agree.
_PROVEN = frozenset({Status.APPLIED, Status.PRESENT, Status.UPSTREAM})


def _recheck(
    tree: SourceTree,
    changes: dict[str, SourceFile],
    fixes: list[Fix],
    outcomes: dict[str, Outcome],
    excused: frozenset[str] = frozenset(),
    confirm: bool = False,
    run: Run | None = None,
) -> None:
    """Run each fix's rules on the result, through check's own code path; a fix whose rules
    still report something is refused, naming the first finding. A finding on a class the
    user left out (``excused``: its symbol's class, or a class its message names) is check's
    to report, not held against the fixes. With ``confirm``, PDG009 too, on the
    patched texts: its finding refuses the first fix whose rules judge that side."""
    if not fixes:
        return
    from .check import check_project, load_project

    project = load_project(tree, run)
    if changes:
        texts = dict(project.texts)
        texts.update({rel: new.text for rel, new in changes.items()})
        project = type(project)(texts, project.run)
    codes = sorted({code for fix in fixes for code in fix.rules})
    checked = tree
    if confirm:
        from ..checks import CONFIRM_CODE
        from ..simulate import confirm as confirming

        codes.append(CONFIRM_CODE)
        checked = confirming.OverlayTree(tree, {rel: new.text for rel, new in changes.items()})
    findings = check_project(checked, project, codes).findings
    blamed: dict[str, list[Finding]] = {}
    for finding in findings:
        if confirm and finding.code == codes[-1]:
            side = confirming.side_of(finding.path)
            fix = next(
                (f for f in fixes if side and side.primary in f.rules),
                next((f for f in fixes if side and side.codes & set(f.rules)), fixes[0]),
            )
            blamed.setdefault(fix.name, []).append(finding)
    for fix in fixes:
        candidates = [*(f for f in findings if f.code in fix.rules), *blamed.get(fix.name, [])]
        mine = [f for f in candidates if not _names(f, excused)]
        if not mine:
            continue
        first = mine[0]
        more = f" (and {len(mine) - 1} more)" if len(mine) > 1 else ""
        claim = outcomes[fix.name].status.value
        outcomes[fix.name] = Outcome(
            Status.REFUSED,
            f"would be {claim}, but check still reports {first.code} {first.message}{more}",
            f"{first.path}:{first.line}",
        )


def _names(finding: Finding, classes: frozenset[str]) -> bool:
    """Is ``finding`` about one of ``classes`` (its symbol's class, or named in its message)?"""
    if not classes:
        return False
    if finding.symbol.split(".")[0] in classes:
        return True
    words = set(re.findall(r"\w+", finding.message))
    return bool(words & classes)


def left_out_classes(ignore: Sequence[str] | None) -> dict[str, frozenset[str]]:
    """The classes ``--ignore FIX:Class`` leaves out of a fix, by fix name."""
    by_name = {fix.name: fix for fix in FIXES}
    found: dict[str, set[str]] = {}
    for value in ignore or ():
        for entry in (n.strip() for n in value.split(",")):
            name, colon, cls = entry.partition(":")
            if not colon:
                continue
            fix = by_name.get(name)
            if fix is None:
                raise UsageError(f"unknown fix {name!r} (the fixes: {', '.join(by_name)})")
            if not fix.per_class:
                per_class = ", ".join(f.name for f in FIXES if f.per_class)
                raise UsageError(
                    f"{name} cannot leave out single classes ({entry!r}); those that can: "
                    f"{per_class}"
                )
            if not cls.isidentifier():
                raise UsageError(f"--ignore {entry!r}: {cls!r} is not a class name")
            found.setdefault(name, set()).add(cls)
    return {name: frozenset(classes) for name, classes in found.items()}


def select_fixes(
    select: Sequence[str] | None, ignore: Sequence[str] | None, disabled: Iterable[str] = ()
) -> tuple[Fix, ...]:
    """The fixes to run, from --select/--ignore (comma-separated fix names; ``FIX:Class`` in
    --ignore leaves a class out of a fix, not the fix: ``left_out_classes``) and the settings'
    disabled fixes (``[tool.pdguard.fix.NAME] enabled = false``; --select names them back)."""
    by_name = {fix.name: fix for fix in FIXES}

    def names(values: Sequence[str]) -> set[str]:
        found = {
            n.strip() for value in values for n in value.split(",") if n.strip() and ":" not in n
        }
        unknown = sorted(found - set(by_name))
        if unknown:
            raise UsageError(f"unknown fix {unknown[0]!r} (the fixes: {', '.join(by_name)})")
        return found

    chosen = names(select) if select is not None else set(by_name) - set(disabled)
    chosen -= names(ignore) if ignore else set()
    if not chosen:
        raise UsageError("--select/--ignore (and the settings) leave no fix to apply")
    return tuple(fix for fix in FIXES if fix.name in chosen)


def write(result: ApplyResult) -> None:
    """Write every changed file atomically, all or nothing (directory trees only)."""
    from ..writer import FileChange, write_all

    if not isinstance(result.tree, DirectoryTree):
        raise TypeError(f"{result.tree.label}: only a directory tree can be written")
    write_all(
        [
            FileChange(
                path=result.tree.path(rel).resolve(),
                old=result.originals[rel].encode(),
                new=new.encode(),
            )
            for rel, new in result.changes.items()
        ]
    )


# -- output ---------------------------------------------------------------------------------


WOULD_APPLY = "would-apply"  # a dry run's (or a refused run's) word for `applied`


def shown_status(status: Status, *, written: bool) -> str:
    """``applied`` only when the fix was written; ``would-apply`` otherwise."""
    return WOULD_APPLY if status is Status.APPLIED and not written else status.value


def as_json(result: ApplyResult, *, written: bool, diff: str | None = None) -> str:
    payload: dict[str, object] = {
        "target": result.target,
        "sglang_version": result.sglang_version,
        "files_changed": sorted(result.shown(rel) for rel in result.changes),
        "written": written,
        "fixes": {
            name: shown_status(outcome.status, written=written)
            for name, outcome in result.outcomes.items()
        },
        "notes": {name: outcome.note for name, outcome in result.outcomes.items() if outcome.note},
    }
    if diff is not None:
        payload["diff"] = diff
    return json.dumps(payload, indent=2)


def text(result: ApplyResult, *, written: bool, diff: str | None = None) -> str:
    version = result.sglang_version or "version unknown"
    lines = [f"{result.target} (sglang {version})"]
    width = max(len(name) for name in result.outcomes)
    for name, outcome in result.outcomes.items():
        status = shown_status(outcome.status, written=written)
        note = f"  {outcome.note}" if outcome.note else ""
        lines.append(f"  {name:<{width}}  {status}{note}")
    if result.changes:
        verb = "changed" if written else "would change"
        shown = sorted(result.shown(rel) for rel in result.changes)
        lines.append(f"{len(shown)} file(s) {verb}: " + ", ".join(shown))
    elif not result.refused:
        lines.append("nothing to change")
    return "\n".join(lines)


FORMATS = {"text": text, "json": as_json}


# -- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target(parser, "the SGLang tree to patch")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff",
        action="store_true",
        help="write nothing; print a unified diff (in the JSON with --format json); "
        "exit 1 if there is one",
    )
    mode.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if anything would change"
    )
    names = ", ".join(fix.name for fix in FIXES)
    parser.add_argument(
        "--select",
        action="append",
        metavar="FIXES",
        help=f"apply only these fixes (comma-separated; of: {names})",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        metavar="FIXES",
        help="leave these fixes out; FIX:Class leaves one class out of a fix (sender-abort)",
    )
    parser.add_argument(
        "--no-markers",
        dest="markers",
        action="store_false",
        help="write no `# pdguard: <fix>` comments; later runs recognise the code by what it "
        "does (status upstream)",
    )
    add_confirm(parser, default=True)
    add_format(parser, FORMATS)
    add_output_file(parser, "apply.json")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="a fix that was partly removed: take the files with its marker back to their "
        "pristine copy (the last commit, or the release's wheel) and apply it again; refused "
        "if that would lose a change that is not pdguard's",
    )
    add_quiet(parser, "the report (unless a fix is refused)")
    config.add_arguments(parser)


def recover_journal(tree: SourceTree, *, dry_run: bool = False) -> None:
    """Repair what a run killed mid-write left in the tree before reading it; say so. A dry
    run writes nothing, not even a repair: a journal there is an error (exit 2) naming it."""
    if not isinstance(tree, DirectoryTree):
        return
    from ..writer import pending, recover

    if dry_run:
        for journal in pending(tree.base):
            raise TargetError(
                f"{journal}: a pdguard journal (an interrupted write) is pending; a dry run "
                "repairs nothing: run `pdguard apply` without --check/--diff to repair it, or "
                "remove the file if pdguard did not write it"
            )
        return
    for note in recover(tree.base):
        print(note, file=sys.stderr)


def _report(args: argparse.Namespace, report: str) -> None:
    """The report: to --output-file, else stdout; with --diff in text, stdout is the patch
    alone (``pdguard apply . --diff | git apply``) and the report goes to stderr."""
    if args.diff and args.format == "text" and args.output_file is None:
        print(report, file=sys.stderr)
    elif not args.quiet or args.output_file is not None:
        emit(report, args.output_file)


def fix_before_check(args: argparse.Namespace) -> dict[str, list[Finding]]:
    """``check --fix``: plan the fixes of every tree check will read, refuse before writing
    anything if one is refused, then write; each tree's findings before (by its label: check
    counts the fixed ones, ``--show-fixes`` lists them). (``pdguard.cli`` runs it before
    ``check``: check reads what this wrote.)"""
    from .check import check_tree, select_codes, trees_of

    trees = trees_of(args)
    first = None if args.installed else (args.paths or ["."])[0]
    settings = config.load(args, first)
    fixes = select_fixes(None, None, settings.disabled_fixes)
    codes = select_codes(*settings.rule_codes(args.select, args.ignore))
    quiet = args.quiet
    plans = []
    before: dict[str, list[Finding]] = {}
    run_ = Run()
    for tree in trees:
        if not isinstance(tree, DirectoryTree):
            continue
        recover_journal(tree)
        try:
            before[tree.label] = check_tree(tree, codes, run_).findings
            result = plan(tree, fixes, run=run_)
        except ParseError:
            before.pop(tree.label, None)
            continue  # reported below as a syntax error of the check
        if result.refused:
            raise RefusedError(result.refusal())
        plans.append(result)
    for result in plans:
        if result.changes:
            write(result)
        names = [n for n, o in result.outcomes.items() if o.status is Status.APPLIED]
        if names and not quiet:
            files = ", ".join(sorted(result.shown(rel) for rel in result.changes))
            print(f"pdguard: fixed ({', '.join(names)}): {files}", file=sys.stderr)
    return before


def would_fix(
    result: CheckResult, codes: Sequence[str], disabled: Iterable[str] = ()
) -> tuple[Counter[tuple[str, str]], list[str]]:
    """``--show-fixes``: the findings ``pdguard apply`` would fix in the tree (its plan, nothing
    written, re-checked as check runs), counted by (path, code), and a line for each fix it
    would refuse."""
    from .. import checks
    from .check import check_project, gone

    if result.errors or not result.findings:
        return Counter(), []
    planned = plan(result.tree, select_fixes(None, None, disabled), confirm=False)
    if planned.refused:
        return Counter(), [
            f"{name} would be refused: {outcome.note}" for name, outcome in planned.refused.items()
        ]
    texts = {**result.project.texts, **{rel: new.text for rel, new in planned.changes.items()}}
    static = [c for c in codes if c != checks.CONFIRM_CODE]
    after = check_project(result.tree, type(result.project)(texts), static).findings
    return gone(result.findings, after), []


def repair(
    tree: DirectoryTree, fixes: tuple[Fix, ...], result: ApplyResult, run: Run | None = None
) -> tuple[ApplyResult, list[str]]:
    """The plan that restores the partly removed fixes of ``result`` (a refused plan), and one
    note per restored file; a RefusedError when it cannot be done safely."""
    from ..repair import RestoredTree, foreign_line, partly_removed, pristine

    partial = partly_removed(result.refused, result.originals)
    if not partial:
        raise RefusedError(f"--repair: no fix is partly removed; {result.refusal()}")
    files = sorted({rel for rels in partial.values() for rel in rels})
    sources = {rel: pristine(tree, rel) for rel in files}
    restored = RestoredTree(tree.root, tree.base, {rel: d for rel, (d, _) in sources.items()})
    again = plan(restored, fixes, run=run)
    if again.refused:
        raise RefusedError(f"--repair: {again.refusal()}")
    originals = {}
    changes = {}
    for rel in sorted({*files, *again.changes}):
        current = result.originals.get(rel)
        if current is None:
            data = tree.read_bytes(rel)
            current = SourceFile.decode(rel, data or b"")
        base = again.originals[rel].text if rel in again.originals else current.text
        fixed = again.changes[rel].text if rel in again.changes else base
        foreign = foreign_line(current.text, base, fixed) if rel in files else None
        if foreign is not None:
            raise RefusedError(
                f"{tree.display(rel)}: --repair would lose a change that is not pdguard's "
                f"({foreign.strip()!r}): restore the file by hand, then run `pdguard apply`"
            )
        if fixed != current.text:
            originals[rel] = current
            changes[rel] = current.with_text(fixed)
    notes = [
        f"pdguard: --repair: {tree.display(rel)}: restored from {sources[rel][1]}, "
        f"{' and '.join(n for n, rels in partial.items() if rel in rels)} applied again"
        for rel in files
    ]
    repaired = ApplyResult(tree, again.sglang_version, again.outcomes, originals, changes)
    return repaired, notes


def _does_not_parse(args: argparse.Namespace, tree: SourceTree, error: ParseError) -> int:
    """A file the fixes read does not parse: the report is that file's diagnostic (``E999
    syntax-error``, as ``check`` gives it: text ``PATH:LINE:COL: E999 ...``, or the JSON
    report's ``errors``), nothing is written, one error line on stderr, exit 2. With
    ``--diff`` in text the report would go to stderr too: the error line alone says it."""
    checked = syntax_result(tree, error)
    first = checked.errors[0]
    path = checked.display_path(first)
    if args.format == "json":
        payload = {
            "target": shown_target(tree),
            "written": False,
            "errors": [finding_json(f, checked.display_path(f)) for f in checked.errors],
        }
        _report(args, json.dumps(payload, indent=2))
    elif not (args.diff and args.output_file is None):  # there, the report is on stderr
        _report(args, text_line(path, first))
    print(f"pdguard: error: {error_line(path, first)}", file=sys.stderr)
    return EXIT_ERROR


def _way_forward(args: argparse.Namespace, result: ApplyResult) -> str:
    """For a fix that was partly removed (or an older pdguard wrote): the exact command that
    restores it."""
    from ..repair import partly_removed

    if args.repair or not partly_removed(result.refused, result.originals):
        return ""
    target = "--installed" if args.installed else shlex.quote(args.target or ".")
    return (
        f"; the fix was partly removed, or written by an older pdguard: "
        f"`pdguard apply --repair {target}` restores it"
    )


def run(args: argparse.Namespace) -> int:
    tree = target_tree(args)
    settings = config.load(args, None if args.installed else args.target or ".")
    render = FORMATS[args.format]
    dry_run = args.diff or args.check
    recover_journal(tree, dry_run=dry_run)
    fixes = select_fixes(args.select, args.ignore, settings.disabled_fixes)
    run_ = Run()  # the command's one run, dropped when it returns
    try:
        result = plan(
            tree,
            fixes,
            left_out_classes(args.ignore),
            markers=args.markers,
            confirm=args.confirm,
            run=run_,
        )
    except ParseError as exc:
        return _does_not_parse(args, tree, exc)
    if result.refused and args.repair and isinstance(tree, DirectoryTree):
        result, notes = repair(tree, fixes, result, run_)
        for note in notes:
            print(note, file=sys.stderr)
    if result.refused:
        _report(args, render(result, written=False))
        raise RefusedError(result.refusal() + _way_forward(args, result))
    if not dry_run and result.changes:
        write(result)
    report = render(result, written=not dry_run, diff=result.diff() if args.diff else None)
    if args.diff and args.format == "text":
        sys.stdout.write(result.diff())  # a patch on stdout; the report on stderr
        sys.stdout.flush()
    where = result.paths_from()
    if where is not None and result.changes and args.diff and not args.quiet:
        print(
            f"pdguard: the diff's paths are relative to {where}: apply it there, the diff on "
            f"stdin (git -C {where} apply < DIFF, or patch -p1 -d {where} < DIFF)",
            file=sys.stderr,
        )
    if not (args.quiet and args.diff and args.format == "text"):
        _report(args, report)
    if (args.check or args.diff) and result.changes:
        return EXIT_CHANGES
    return EXIT_OK
