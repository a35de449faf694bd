"""The pinned-release manifest: ``releases.toml`` next to this module."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pdguard.errors import PdguardError

MANIFEST_PATH = Path(__file__).with_name("releases.toml")

_VERSION_RE = re.compile(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class UnknownReleaseError(PdguardError, ValueError):
    """The requested SGLang version is not pinned in the manifest."""


class ManifestError(ValueError):
    """``releases.toml`` is malformed."""


@dataclass(frozen=True)
class Release:
    """One pinned SGLang release: the exact wheel file and its sha256."""

    version: str
    family: str
    wheel: str
    sha256: str
    ci: bool


def version_key(version: str) -> tuple[tuple[int, ...], int]:
    """Sort key for the ``X.Y.Z[.postN]`` versions used in the manifest (no ``packaging``)."""
    match = _VERSION_RE.fullmatch(version)
    if match is None:
        raise ManifestError(f"unsupported version string {version!r} in {MANIFEST_PATH.name}")
    release = tuple(int(part) for part in match.group(1).split("."))
    post = int(match.group(2)) if match.group(2) is not None else -1
    return release, post


def _parse_release(index: int, table: dict[str, object]) -> Release:
    where = f"{MANIFEST_PATH.name} [[release]] #{index + 1}"
    fields = {"version": str, "family": str, "wheel": str, "sha256": str, "ci": bool}
    for name, kind in fields.items():
        if not isinstance(table.get(name), kind):
            raise ManifestError(f"{where}: {name!r} must be a {kind.__name__}")
    release = Release(**table)  # type: ignore[arg-type]  # field types checked just above
    if not _SHA256_RE.fullmatch(release.sha256):
        raise ManifestError(f"{where}: sha256 must be 64 lowercase hex digits")
    prefix = f"sglang-{release.version}-"
    if not (release.wheel.startswith(prefix) and release.wheel.endswith(".whl")):
        raise ManifestError(f"{where}: wheel {release.wheel!r} does not match {release.version}")
    return release


@lru_cache(maxsize=1)
def _load() -> tuple[Release, ...]:
    with MANIFEST_PATH.open("rb") as handle:
        data = tomllib.load(handle)
    releases = [_parse_release(i, table) for i, table in enumerate(data.get("release", []))]
    versions = [release.version for release in releases]
    if len(set(versions)) != len(versions):
        raise ManifestError(f"{MANIFEST_PATH.name} pins some version more than once")
    return tuple(sorted(releases, key=lambda release: version_key(release.version)))


def load_manifest() -> list[Release]:
    """All pinned releases, oldest first."""
    return list(_load())


def get_release(version: str) -> Release:
    """The pinned release ``version``; raises :class:`UnknownReleaseError` if it is not pinned."""
    for release in _load():
        if release.version == version:
            return release
    raise UnknownReleaseError(f"sglang {version} is not pinned in vendor_sglang/releases.toml")
