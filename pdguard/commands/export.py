"""``pdguard export``: the fixes a release needs as a patch series upstream would take, one
``git format-patch`` file per fix, marker-free, each with its unit test and docs line
(``pdguard.series``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..tree import find_tree, open_tree
from .base import EXIT_OK, add_format, installed_checkout, shown_path

if TYPE_CHECKING:
    from ..series import Exported

NAME = "export"
HELP = "write the fixes a release needs as a git format-patch series (one commit per fix)"
DESCRIPTION = "Write the fixes an SGLang checkout needs as a patch series for `git am`."


def epilog() -> str:
    from ..series import DOCS_PAGE, TEST_DIR

    return f"""\
TARGET is an SGLang checkout: python/sglang/... and {DOCS_PAGE}.
DIR receives 0001-<subject>.patch, 0002-..., one commit per fix that applies, in the
order the fixes depend on each other. Each commit carries the fix (no `# pdguard:`
comments), a unit test under {TEST_DIR}/ and the docs line of the environment
variable it reads. Apply them with `git am --keep-non-patch DIR/*.patch` (which
keeps the subjects' [PD] tag).

exit codes: 0 written (or nothing to export); 2 error (not a checkout, no docs page,
a refused fix, DIR not writable): no patch is written.
"""


def text(commits: list[Exported]) -> str:
    if not commits:
        return "nothing to export: every fix is upstream or not applicable"
    lines = [
        f"{shown_path(c.patch)}  {c.fix}  +{c.added} -{c.removed}  ({', '.join(c.files)})"
        for c in commits
    ]
    total = sum(c.added for c in commits)
    lines.append(f"{len(commits)} commit(s), {total} line(s) added")
    return "\n".join(lines)


def as_json(commits: list[Exported]) -> str:
    return json.dumps(
        [
            {
                "fix": c.fix,
                "patch": shown_path(c.patch),
                "files": list(c.files),
                "added": c.added,
                "removed": c.removed,
            }
            for c in commits
        ],
        indent=2,
    )


FORMATS = {"text": text, "json": as_json}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="the SGLang checkout (default: ., or the checkout . is in)",
    )
    parser.add_argument(
        "--installed",
        action="store_true",
        help="the checkout the sglang this Python imports is installed from (pip install -e); "
        "an installed wheel has none",
    )
    parser.add_argument(
        "-o",
        "--output-directory",
        dest="output",
        metavar="DIR",
        required=True,
        help="where the .patch files go (created; must hold no .patch file)",
    )
    add_format(parser, FORMATS)


def run(args: argparse.Namespace) -> int:
    from ..series import checkout_root, export

    if args.installed:
        if args.target is not None:
            raise UsageError("give TARGET or --installed, not both")
        tree = open_tree(
            installed_checkout(
                "export", "`pdguard apply --installed --diff` prints the fixes as one diff"
            )
        )
    else:
        tree = find_tree(args.target if args.target is not None else ".")
    checkout_root(tree)  # a one-line error before any work
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a directory")
    if out.is_dir() and any(out.glob("*.patch")):
        raise UsageError(f"{out}: already holds .patch files; name an empty directory")
    # absolute: git format-patch writes from the series' own temporary repository
    print(FORMATS[args.format](export(tree, out.absolute())))
    return EXIT_OK
