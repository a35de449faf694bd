"""``pdguard demo``: fetch a pinned SGLang release, patch a temporary copy, show the diff and the
report (``apply``'s)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from ..errors import RefusedError
from ..tree import open_tree
from . import apply
from .base import EXIT_OK, add_format

NAME = "demo"
HELP = "fetch a pinned SGLang release, patch a copy, show the diff and the report"
DESCRIPTION = (
    "Fetch a pinned release with vendor_sglang (PyPI, sha256-checked), apply the fixes to a "
    "temporary copy, print the diff and the report."
)
RELEASE = "0.5.14"
# The demo shows apply's report.
FORMATS = apply.FORMATS


def epilog() -> str | None:
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--release", default=RELEASE, help=f"default: {RELEASE}")
    add_format(parser, FORMATS)


def run(args: argparse.Namespace) -> int:
    from pdguard.vendor_sglang import fetch_release

    release = args.release
    source = fetch_release(release)
    print(f"pdguard demo: sglang {release} from PyPI (sha256-pinned), patched in a temporary copy")
    with tempfile.TemporaryDirectory(prefix="pdguard-demo-") as tmp:
        copy = Path(tmp) / f"sglang-{release}"
        shutil.copytree(source, copy)
        result = apply.plan(open_tree(copy))
        sys.stdout.write(result.diff())
        print(FORMATS[args.format](result, written=False))
        if result.refused:
            raise RefusedError(result.refusal())
        return EXIT_OK
