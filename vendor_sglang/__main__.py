"""``python -m pdguard.vendor_sglang``: list the pinned SGLang releases or fetch them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pdguard.vendor_sglang.fetch import FetchError, fetch_release
from pdguard.vendor_sglang.manifest import (
    ManifestError,
    UnknownReleaseError,
    get_release,
    load_manifest,
)

EXIT_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pdguard.vendor_sglang", description="Pinned SGLang releases for pdguard."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("fetch", help="download and extract pinned releases")
    fetch.add_argument("versions", nargs="*", metavar="VERSION", help="pinned versions to fetch")
    fetch.add_argument("--ci", action="store_true", help="every release with ci = true")
    fetch.add_argument("--all", action="store_true", help="every pinned release")
    commands.add_parser("list", help="show the pinned releases: version, family, ci")
    return parser


def _selected(versions: Sequence[str], ci: bool, every: bool) -> list[str]:
    """The requested versions in manifest order; unknown versions raise before any download."""
    wanted = {get_release(version).version for version in versions}
    return [
        release.version
        for release in load_manifest()
        if every or (ci and release.ci) or release.version in wanted
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "fetch" and not (args.versions or args.ci or args.all):
        parser.error("fetch: give VERSION ..., --ci or --all")
    try:
        if args.command == "list":
            for release in load_manifest():
                print(f"{release.version:<14} {release.family:<4} ci={str(release.ci).lower()}")
            return 0
        for version in _selected(args.versions, args.ci, args.all):
            print(f"{version} {fetch_release(version)}", flush=True)
    except (UnknownReleaseError, ManifestError, FetchError, OSError) as error:
        print(f"vendor_sglang: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
