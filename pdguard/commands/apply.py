"""``pdguard apply``: run every fix on a tree, check the result, and (unless asked not to) write
it. ``plan`` is also what ``verify``, ``carry`` and ``demo`` run."""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RefusedError, TargetError, UsageError
from ..fixes import FIXES, Fix, Outcome, Status
from ..sglang_names import DISAGGREGATION_DIR, INFLIGHT_TIMEOUT_ENV
from ..source_file import SourceFile
from ..tree import DirectoryTree, SourceTree, installed_tree, open_tree

if TYPE_CHECKING:
    from ..checks import Finding

from .base import EXIT_CHANGES, EXIT_OK, add_format, add_output_file, emit, relative

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

Paths in the report and the diff are relative to the current directory.
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

    def shown(self, rel: str) -> str:
        """File ``rel`` as the report names it: relative to the current directory for a tree on
        disk (``python/sglang/srt/...`` at a checkout's root), as the tree says otherwise."""
        if isinstance(self.tree, DirectoryTree):
            return Path(relative(self.tree.base / rel)).as_posix()
        return self.tree.display(rel)

    def diff(self) -> str:
        chunks: list[str] = []
        for rel, new in self.changes.items():
            shown = self.shown(rel)
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
) -> ApplyResult:
    """Every fix's outcome and every file's new content; nothing is written. ``markers``: whether
    the new code carries the fixes' marker comments (``Workspace``).

    Fixes not in ``fixes`` are ``skipped``. A fix reports ``applied`` or ``present`` only when
    the rules that prove it, run as ``pdguard check`` runs them, pass on the result; otherwise
    it is refused and its note names what check still reports. A refusal of any fix keeps
    every file as it is (``changes`` is then empty). ``left_out``: classes left out of a fix
    (``--ignore FIX:Class``); check's findings on them are not held against the fixes."""
    from ..checks.project import parse_module
    from ..workspace import Workspace

    workspace = Workspace(tree, markers=markers)
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
            compile(parse_module(new.text, rel), rel, "exec", dont_inherit=True)
        except SyntaxError as exc:  # a bug in pdguard: never write it
            name = next(n for n, o in outcomes.items() if o.status is Status.APPLIED)
            outcomes[name] = Outcome(
                Status.REFUSED, f"internal error: the patched file does not compile: {exc}", rel
            )
            return result
    proven = [f for f in fixes if outcomes[f.name].status in _PROVEN]
    excused = frozenset().union(*workspace.left_out.values())
    _recheck(tree, changes, proven, outcomes, excused)
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
) -> None:
    """Run each fix's rules on the result, through check's own code path; a fix whose rules
    still report something is refused, naming the first finding. A finding on a class the
    user left out (``excused``: its symbol's class, or a class its message names) is check's
    to report, not held against the fixes."""
    if not fixes:
        return
    from .check import check_project, load_project

    project = load_project(tree)
    if changes:
        texts = dict(project.texts)
        texts.update({rel: new.text for rel, new in changes.items()})
        project = type(project)(texts)
    codes = sorted({code for fix in fixes for code in fix.rules})
    findings = check_project(tree, project, codes).findings
    for fix in fixes:
        mine = [f for f in findings if f.code in fix.rules and not _names(f, excused)]
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


def select_fixes(select: Sequence[str] | None, ignore: Sequence[str] | None) -> tuple[Fix, ...]:
    """The fixes to run, from --select/--ignore (comma-separated fix names; ``FIX:Class`` in
    --ignore leaves a class out of a fix, not the fix: ``left_out_classes``)."""
    by_name = {fix.name: fix for fix in FIXES}

    def names(values: Sequence[str]) -> set[str]:
        found = {
            n.strip() for value in values for n in value.split(",") if n.strip() and ":" not in n
        }
        unknown = sorted(found - set(by_name))
        if unknown:
            raise UsageError(f"unknown fix {unknown[0]!r} (the fixes: {', '.join(by_name)})")
        return found

    chosen = names(select) if select is not None else set(by_name)
    chosen -= names(ignore) if ignore else set()
    if not chosen:
        raise UsageError("--select/--ignore leave no fix to apply")
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
        "target": result.tree.label,
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
    lines = [f"{result.tree.label} (sglang {version})"]
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
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("target", nargs="?", metavar="TARGET", help="the SGLang tree to patch")
    where.add_argument(
        "--installed",
        action="store_true",
        help="patch the sglang importable by this Python (found without importing it)",
    )
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
    add_format(parser, FORMATS)
    add_output_file(parser, "apply.json")


def _recover(tree: SourceTree, *, dry_run: bool) -> None:
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
    else:
        emit(report, args.output_file)


def run(args: argparse.Namespace) -> int:
    tree = installed_tree() if args.installed else open_tree(args.target)
    render = FORMATS[args.format]
    dry_run = args.diff or args.check
    _recover(tree, dry_run=dry_run)
    result = plan(
        tree,
        select_fixes(args.select, args.ignore),
        left_out_classes(args.ignore),
        markers=args.markers,
    )
    if result.refused:
        _report(args, render(result, written=False))
        raise RefusedError(result.refusal())
    if not dry_run and result.changes:
        write(result)
    report = render(result, written=not dry_run, diff=result.diff() if args.diff else None)
    if args.diff and args.format == "text":
        sys.stdout.write(result.diff())  # a patch on stdout; the report on stderr
        sys.stdout.flush()
    _report(args, report)
    if (args.check or args.diff) and result.changes:
        return EXIT_CHANGES
    return EXIT_OK
