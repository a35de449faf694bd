"""``pdguard demo``: fetch a pinned SGLang release, patch a copy of it, show the diff and the
report (``apply``'s), and say where that copy is (removed on exit, or kept with ``--keep``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import terminal
from ..errors import RefusedError, UsageError
from ..run import Run
from ..tree import open_tree
from . import apply
from .base import EXIT_OK, add_format, add_quiet

NAME = "demo"
HELP = "fetch a pinned SGLang release, patch a copy, show the diff and the report"
DESCRIPTION = (
    "Fetch a pinned release with vendor_sglang (PyPI, sha256-checked, cached), apply the fixes "
    "to a copy of it, and print the diff and apply's report. The copy is temporary (removed "
    "when the demo ends) unless --keep DIR is given."
)
RELEASE = "0.5.14"
# The demo shows apply's report.
FORMATS = apply.FORMATS


def epilog() -> str:
    return """\
Progress (the download on a first run) goes to stderr. --format json prints one JSON
object on stdout: apply's report, the diff ("diff") and where the copy was ("demo").

exit codes: 0 patched; 2 error (an unknown release, a download that fails or does not
match its sha256, a refused fix, --keep DIR that already holds the release).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--release", default=None, help=f"the pinned release to patch (default: {RELEASE})"
    )
    source.add_argument(
        "--installed",
        action="store_true",
        help="patch a copy of the sglang package this Python would import instead (found "
        "without importing it; the package itself is not touched)",
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="patch the copy in DIR/sglang-<release> and keep it (default: a temporary copy, "
        "removed at the end)",
    )
    add_format(parser, FORMATS)
    add_quiet(parser, "progress")


@contextmanager
def _progress(what: str) -> Iterator[None]:
    """``what`` on stderr, then (when stderr is a terminal) a tick every few seconds while it
    runs, then how long it took; nothing with -q."""
    if terminal.quiet_now():
        yield
        return
    print(f"pdguard demo: {what} ...", file=sys.stderr, flush=True)
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(5.0):
            if terminal.progress_wanted():
                print(
                    f"pdguard demo: ... {time.monotonic() - start:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
    print(f"pdguard demo: done in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    with terminal.quiet(args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from pdguard.vendor_sglang import fetch_release, get_release, is_cached

    if args.installed:
        from ..tree import installed_tree

        tree = installed_tree()
        release = tree.sglang_version() or "installed"
        source = tree.base
        if not args.quiet:
            print(f"pdguard demo: the installed sglang {release} ({source})", file=sys.stderr)
        return _copies(args, release, source)
    release = args.release or RELEASE
    get_release(release)  # an unknown release: one error line, before any progress
    if is_cached(release):
        if not args.quiet:
            print(f"pdguard demo: sglang {release} from the cache (sha256-pinned)", file=sys.stderr)
        source = fetch_release(release)
    else:
        with _progress(f"fetching sglang {release} from PyPI (sha256-pinned, cached after)"):
            source = fetch_release(release)
    return _copies(args, release, source)


def _copies(args: argparse.Namespace, release: str, source: Path) -> int:
    """The demo on a copy of ``source`` (the directory holding ``sglang``): kept in --keep DIR,
    or a temporary one."""
    if args.keep is not None:
        copy = Path(args.keep) / f"sglang-{release}"
        if copy.exists():
            raise UsageError(f"--keep {args.keep}: {copy} exists; remove it or choose another DIR")
        return _demo(args, release, source, copy, kept=True)
    with tempfile.TemporaryDirectory(prefix="pdguard-demo-") as tmp:
        return _demo(args, release, source, Path(tmp) / f"sglang-{release}", kept=False)


def _demo(args: argparse.Namespace, release: str, source: Path, copy: Path, *, kept: bool) -> int:
    # the sglang package only (an installed one sits in site-packages beside others)
    shutil.copytree(source / "sglang", copy / "sglang", ignore=shutil.ignore_patterns("*.pyc"))
    result = apply.plan(open_tree(copy), run=Run())  # the command's one run
    written = not result.refused
    if written and result.changes:
        apply.write(result)
    with contextlib.chdir(copy.parent):  # the report names files as sglang-<release>/sglang/...
        diff = result.diff()
        report_json = apply.as_json(result, written=written, diff=diff)
        report_text = apply.text(result, written=written)
    where = (
        f"patched the copy kept at {copy}"
        if kept
        else f"patched a temporary copy ({copy}), removed now that the demo ends; "
        "use --keep DIR to keep it"
    )
    if result.refused:
        where = f"refused: nothing written to the copy at {copy}"
    if args.format == "json":
        payload = json.loads(report_json)
        payload["demo"] = {
            "release": release,
            "source": (
                f"installed: {source}"
                if args.installed
                else "PyPI wheel, sha256-pinned (vendor_sglang)"
            ),
            "copy": str(copy),  # files_changed and the diff are relative to its parent
            "kept": kept,
            "summary": where,
        }
        print(json.dumps(payload, indent=2))
    else:
        origin = f"installed at {source}" if args.installed else "from PyPI (sha256-pinned)"
        print(f"pdguard demo: sglang {release} {origin}")
        sys.stdout.write(diff)
        print(report_text)
        print(f"pdguard demo: {where}")
    if result.refused:
        raise RefusedError(result.refusal())
    return EXIT_OK
