"""``pdguard``: command line. Parses arguments, builds the tree, calls a pipeline, prints a report
and picks the exit code: 0 done or nothing to do, 1 changes needed (``--check``), 2 error."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .tree import SourceTree, TargetError, installed_tree, open_tree
from .writer import WriteError

if TYPE_CHECKING:
    from .pipeline import ApplyResult

# Each command imports what it needs when it runs: `check` never loads LibCST.
CHECK_FORMATS = ("github", "json", "sarif", "text")

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2
DEMO_RELEASE = "0.5.14"

DESCRIPTION = """\
Apply, and prove, a liveness fix for SGLang prefill-decode (PD) disaggregation.

Requests that finished prefill wait in the prefill inflight queue until their KV cache
reaches decode; without a deadline, a decode restart can wedge them there forever.
pdguard adds that deadline (inflight-deadline) and makes every KV sender's bootstrap
timeout able to fire (sender-bootstrap-timeout), as LibCST codemods that keep the
target's formatting, import order and line endings.
"""

APPLY_EPILOG = """\
TARGET may be a checkout root (python/sglang/...), an `sglang` package directory, or
any directory holding sglang/srt/disaggregation.

statuses: applied, present (pdguard's fix is already there), upstream (the release
already does it), not-applicable, refused (the note says why; nothing is written).

exit codes: 0 done or nothing to do; 1 with --check when a change is needed;
2 error (not SGLang, a file that does not parse, a refused fix): nothing is written.

environment of the patched SGLang:
  SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT  seconds in the inflight queue before a
      request is failed (default 300; 0 turns the deadline off)
"""


CHECK_EPILOG = """\
rules:
  PDG001  inflight request can wait forever (no deadline bounds a keep path)
  PDG002  inflight deadline decided per rank (after the poll all-reduce)
  PDG003  inflight deadline clock starts too early or restarts
  PDG004  KV sender can stay in Bootstrapping forever
  PDG005  name used by the fix's code is not imported

A finding on a line that carries `# pdguard: ignore[PDG004]` (or a bare
`# pdguard: ignore`) is suppressed.

exit codes: 0 no findings; 1 findings; 2 error (not SGLang, a file that does not
parse, an unknown rule code).
"""


VERIFY_EPILOG = """\
statuses: carried (property holds, pdguard's marker there), upstream (holds without
pdguard), applicable (does not hold; apply works in memory and check then passes),
drifted (does not hold; apply cannot anchor: the note names what moved),
not-applicable.

exit codes: 0 every ref carried/upstream/not-applicable for every fix; 1 any
applicable or drifted; 2 error (unknown ref, not a git repo, no SGLang tree at a ref).
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _positive(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pdguard", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"pdguard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply = commands.add_parser(
        "apply",
        help="apply the fixes to an SGLang tree",
        description="Apply the inflight-deadline and sender-bootstrap-timeout fixes.",
        epilog=APPLY_EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    where = apply.add_mutually_exclusive_group(required=True)
    where.add_argument("target", nargs="?", metavar="TARGET", help="the SGLang tree to patch")
    where.add_argument(
        "--installed",
        action="store_true",
        help="patch the sglang importable by this Python (found without importing it)",
    )
    mode = apply.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff; write nothing")
    mode.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if anything would change"
    )
    apply.add_argument("--format", choices=["text", "json"], default="text")

    check = commands.add_parser(
        "check",
        help="prove that every non-terminal poll path has a timeout",
        description="Check an SGLang tree for the liveness properties (rules PDG001-PDG005).",
        epilog=CHECK_EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    check.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="an SGLang tree (as for apply), or files inside one (as pre-commit passes them)",
    )
    check.add_argument("--format", choices=CHECK_FORMATS, default="text", help="default: text")
    check.add_argument("--select", action="append", metavar="CODES", help="e.g. PDG001,PDG004")
    check.add_argument("--ignore", action="append", metavar="CODES", help="e.g. PDG004")
    check.add_argument(
        "--simulate",
        action="store_true",
        help="also run `pdguard simulate`'s scenarios on the tree (text or json format)",
    )

    verify = commands.add_parser(
        "verify",
        help="say, per upstream ref or release, whether each fix is carried, upstream, ...",
        description="Verify refs of a git repository (read from git objects: no checkout) "
        "or released wheels.",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    source = verify.add_mutually_exclusive_group(required=True)
    source.add_argument("--repo", metavar="PATH", help="a git repository holding SGLang")
    source.add_argument(
        "--pypi", nargs="+", metavar="VERSION", help="released wheels (vendor_sglang)"
    )
    verify.add_argument("--ref", action="append", default=[], help="a ref to verify (repeat)")
    verify.add_argument("--tags", metavar="PATTERN", help="every tag matching, e.g. 'v0.5.*'")
    verify.add_argument("--format", choices=["table", "json", "github"], default="table")
    verify.add_argument(
        "--jobs", type=_positive, default=None, help="worker processes (default: CPUs)"
    )

    carry = commands.add_parser(
        "carry",
        help="commit the fixed tree of a ref as a new branch (git objects only)",
        description="Apply the fixes to the tree of --onto and commit it on a new branch "
        "(parent: that ref). The working tree, index and HEAD are not touched.",
    )
    carry.add_argument("--repo", required=True, metavar="PATH")
    carry.add_argument("--onto", required=True, metavar="REF")
    carry.add_argument("--branch", required=True, metavar="NAME")
    carry.add_argument("--force", action="store_true", help="move the branch if it exists")

    simulate = commands.add_parser(
        "simulate",
        help="run the target's own inflight-queue code against a simulated scheduler",
        description="Load process_disagg_prefill_inflight_queue (and the code around it) from "
        "the target's source, give it stand-ins for SGLang's runtime, and run named scenarios "
        "on N simulated ranks with a simulated clock.",
        epilog="Each scenario expects what the inflight-deadline fix should give; on an "
        "unpatched tree the wedge rows fail and show the bug.\n\nexit codes: 0 every scenario "
        "passes (or does not apply); 1 any fails (e.g. an unpatched tree); 2 the target's code "
        "cannot be loaded or reaches something with no stand-in (the message says which).",
        formatter_class=argparse.RawTextHelpFormatter,
    )
    simulate.add_argument("target", metavar="PATH", help="the SGLang tree (as for apply)")
    simulate.add_argument("--ranks", type=int, default=2, help="simulated TP ranks (default 2)")
    simulate.add_argument("--format", choices=["table", "json"], default="table")
    simulate.add_argument(
        "--scenario", action="append", metavar="NAME", help="run only this scenario (repeat)"
    )

    demo = commands.add_parser(
        "demo",
        help="fetch a pinned SGLang release, patch a copy, show the diff and the report",
        description="Fetch a pinned release with vendor_sglang (PyPI, sha256-checked), "
        "apply the fixes to a temporary copy, print the diff and the report.",
    )
    demo.add_argument("--release", default=DEMO_RELEASE, help=f"default: {DEMO_RELEASE}")
    demo.add_argument("--format", choices=["text", "json"], default="text")
    return parser


def _render(result: ApplyResult, fmt: str, written: bool) -> str:
    from . import report

    if fmt == "json":
        return report.apply_json(result, written=written)
    return report.apply_text(result, written=written)


def _refusal_line(result: ApplyResult) -> str:
    name, outcome = next(iter(result.refused.items()))
    where = outcome.where or ""
    if where and not where.startswith("/"):
        where = result.tree.display(where)
    return f"{where + ': ' if where else ''}{name} refused: {outcome.note}"


def run_apply(tree: SourceTree, *, diff: bool, check: bool, fmt: str) -> int:
    from . import pipeline

    result = pipeline.plan(tree)
    if result.refused:
        print(_render(result, fmt, written=False))
        print(f"pdguard: error: {_refusal_line(result)}", file=sys.stderr)
        return EXIT_ERROR
    dry_run = diff or check
    if not dry_run and result.changes:
        pipeline.write(result)
    if diff and result.changes:
        sys.stdout.write(result.diff())
    print(_render(result, fmt, written=not dry_run))
    if check and result.changes:
        return EXIT_CHANGES
    return EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    from . import check_report, checking

    if args.simulate and args.format not in ("text", "json"):
        raise TargetError("--simulate reports in --format text or json")
    codes = checking.select_codes(args.select, args.ignore)
    trees = checking.trees_for(args.paths)
    results = [checking.check_tree(tree, codes) for tree in trees]
    failed = any(r.findings for r in results)
    output = check_report.FORMATS[args.format](results)
    if args.simulate:
        from .simulate import LoadError, SimulationGap, report, run

        try:
            simulations = [run(tree) for tree in trees]
        except (LoadError, SimulationGap) as exc:
            print(f"pdguard: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        failed = failed or not all(s.passed for s in simulations)
        if args.format == "json":
            payload = json.loads(output)
            payload["simulation"] = [json.loads(report.as_json(s)) for s in simulations]
            output = json.dumps(payload, indent=2)
        else:
            output = "\n\n".join([output, *(report.table(s) for s in simulations)])
    if output:
        print(output)
    return EXIT_CHANGES if failed else EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    from . import verify_report, verifying

    if args.repo:
        refs = list(args.ref)
        if args.tags:
            refs += [t for t in verifying.select_tags(args.repo, args.tags) if t not in refs]
        if not refs:
            raise TargetError("verify --repo needs --ref REF or --tags PATTERN")
        reports = verifying.verify_git(args.repo, refs, args.jobs)
    else:
        if args.ref or args.tags:
            raise TargetError("--ref/--tags go with --repo, not --pypi")
        reports = verifying.verify_pypi(args.pypi, args.jobs)
    output = verify_report.FORMATS[args.format](reports)
    if output:
        print(output)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_CHANGES


def run_carry(args: argparse.Namespace) -> int:
    from .carrying import carry

    done = carry(args.repo, args.onto, args.branch, force=args.force)
    if done.commit is None:
        print(f"{args.onto} already carries every fix: no commit")
    else:
        print(
            f"{args.branch} -> {done.commit[:12]} (on {args.onto}): "
            + ", ".join(f"{n} {o.status.value}" for n, o in done.plan.outcomes.items())
        )
    return EXIT_OK


def run_simulate(args: argparse.Namespace) -> int:
    from .simulate import NAMES, LoadError, SimulationGap, report, run

    if args.ranks < 1:
        raise TargetError(f"--ranks must be at least 1, got {args.ranks}")
    unknown = sorted(set(args.scenario or ()) - set(NAMES))
    if unknown:
        raise TargetError(f"unknown scenario {unknown[0]!r}; the scenarios: {', '.join(NAMES)}")
    try:
        result = run(open_tree(args.target), ranks=args.ranks, names=args.scenario)
    except (LoadError, SimulationGap) as exc:
        print(f"pdguard: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(report.FORMATS[args.format](result))
    return EXIT_OK if result.passed else EXIT_CHANGES


def run_demo(release: str, fmt: str) -> int:
    from pdguard.vendor_sglang import fetch_release

    source = fetch_release(release)
    print(f"pdguard demo: sglang {release} from PyPI (sha256-pinned), patched in a temporary copy")
    with tempfile.TemporaryDirectory(prefix="pdguard-demo-") as tmp:
        copy = Path(tmp) / f"sglang-{release}"
        shutil.copytree(source, copy)
        tree = open_tree(copy)
        from . import pipeline

        result = pipeline.plan(tree)
        sys.stdout.write(result.diff())
        print(_render(result, fmt, written=False))
        return EXIT_ERROR if result.refused else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "apply":
            tree = installed_tree() if args.installed else open_tree(args.target)
            return run_apply(tree, diff=args.diff, check=args.check, fmt=args.format)
        if args.command == "check":
            return run_check(args)
        if args.command == "verify":
            return run_verify(args)
        if args.command == "carry":
            return run_carry(args)
        if args.command == "simulate":
            return run_simulate(args)
        return run_demo(args.release, args.format)
    except (TargetError, WriteError) as exc:
        print(f"pdguard: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # vendor_sglang's fetch errors and the like: one line, exit 2
        from pdguard.vendor_sglang import FetchError, UnknownReleaseError

        if isinstance(exc, FetchError | UnknownReleaseError):
            print(f"pdguard: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        raise


if __name__ == "__main__":
    sys.exit(main())
