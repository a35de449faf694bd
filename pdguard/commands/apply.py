"""``pdguard apply``: run every fix on a tree, check the result, and (unless asked not to) write
it. ``plan`` is also what ``verify``, ``carry`` and ``demo`` run."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RefusedError, UsageError
from ..fixes import FIXES, Fix, Outcome, Status
from ..sglang_names import DISAGGREGATION_DIR, INFLIGHT_TIMEOUT_ENV
from ..source_file import SourceFile
from ..tree import DirectoryTree, SourceTree, installed_tree, open_tree
from .base import EXIT_CHANGES, EXIT_OK, add_format, add_output_file, emit, relative
from .check import add_confirm

if TYPE_CHECKING:
    from ..checks.model import Finding

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
journal, see README); what it repaired is printed on stderr.

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


def plan(tree: SourceTree, fixes: tuple[Fix, ...] = FIXES, confirm: bool = False) -> ApplyResult:
    """Every fix's outcome and every file's new content; nothing is written.

    Fixes not in ``fixes`` are ``skipped``. A fix reports ``applied`` or ``present`` only when
    the rules that prove it, run as ``pdguard check`` runs them, pass on the result; otherwise
    it is refused and its note names what check still reports. A refusal of any fix keeps
    every file as it is (``changes`` is then empty). With ``confirm``, where something changes,
    the re-check also runs the patched code in simulate's sandbox (PDG009, as ``check
    --confirm``): a fix whose side the scenarios still show unbounded is refused too."""
    from ..checks.project import parse_module
    from ..workspace import Workspace

    workspace = Workspace(tree)
    outcomes = {
        fix.name: fix.plan(workspace) if fix in fixes else Outcome(Status.SKIPPED, _LEFT_OUT)
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
    _recheck(tree, changes, proven, outcomes, confirm=confirm and bool(changes))
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
    confirm: bool = False,
) -> None:
    """Run each fix's rules on the result, through check's own code path; a fix whose rules
    still report something is refused, naming the first finding. With ``confirm``, PDG009
    too, on the patched texts: its finding refuses the first fix whose rules judge that side."""
    if not fixes:
        return
    from .check import check_project, load_project

    project = load_project(tree)
    if changes:
        texts = dict(project.texts)
        texts.update({rel: new.text for rel, new in changes.items()})
        project = type(project)(texts)
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
        mine = [f for f in findings if f.code in fix.rules] + blamed.get(fix.name, [])
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


def select_fixes(select: Sequence[str] | None, ignore: Sequence[str] | None) -> tuple[Fix, ...]:
    """The fixes to run, from --select/--ignore (comma-separated fix names)."""
    by_name = {fix.name: fix for fix in FIXES}

    def names(values: Sequence[str]) -> set[str]:
        found = {n.strip() for value in values for n in value.split(",") if n.strip()}
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
    parser.add_argument("--ignore", action="append", metavar="FIXES", help="leave these fixes out")
    add_confirm(parser, default=True)
    add_format(parser, FORMATS)
    add_output_file(parser, "apply.json")


def _recover(tree: SourceTree) -> None:
    """Repair what a run killed mid-write left in the tree before reading it; say so."""
    if not isinstance(tree, DirectoryTree):
        return
    from ..writer import recover

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
    _recover(tree)
    result = plan(tree, select_fixes(args.select, args.ignore), confirm=args.confirm)
    if result.refused:
        _report(args, render(result, written=False))
        raise RefusedError(result.refusal())
    dry_run = args.diff or args.check
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
