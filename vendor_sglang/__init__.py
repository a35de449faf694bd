"""Pinned SGLang releases for pdguard's tests, benchmarks and demo.

``releases.toml`` pins each supported SGLang release to one exact wheel file on PyPI and
that file's sha256.  The fetcher downloads a wheel with ``pip download`` (so the machine's
pip index and proxy settings apply), refuses it unless the sha256 matches the manifest, and
extracts only what pdguard needs (``sglang/srt/disaggregation/``, ``sglang/srt/environ.py``
and ``sglang/version.py``) into a cache outside git: ``$PDGUARD_CACHE``, else
``$XDG_CACHE_HOME/pdguard``, else ``~/.cache/pdguard``.  No SGLang source is ever stored in
this repository.

Command line: ``python -m pdguard.vendor_sglang list`` and
``python -m pdguard.vendor_sglang fetch [VERSION ...] [--ci] [--all]``.
"""

from __future__ import annotations

from pdguard.vendor_sglang.fetch import (
    EXTRACT_PATTERNS,
    FetchError,
    UnsafeWheelError,
    WheelHashMismatch,
    cache_dir,
    extract_members,
    fetch_release,
    fetch_unpinned,
    fetch_wheel,
    is_cached,
    wheel_of,
)
from pdguard.vendor_sglang.manifest import (
    ManifestError,
    Release,
    UnknownReleaseError,
    get_release,
    load_manifest,
)

__all__ = [
    "EXTRACT_PATTERNS",
    "FetchError",
    "ManifestError",
    "Release",
    "UnknownReleaseError",
    "UnsafeWheelError",
    "WheelHashMismatch",
    "cache_dir",
    "extract_members",
    "fetch_release",
    "fetch_unpinned",
    "fetch_wheel",
    "get_release",
    "is_cached",
    "load_manifest",
    "wheel_of",
]
