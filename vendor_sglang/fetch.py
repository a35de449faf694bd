"""Download SGLang wheels from PyPI with pip and extract the parts pdguard needs.

Cache layout (outside git, see :func:`cache_dir`)::

    <cache>/wheels/<wheel filename>      verified against the manifest's sha256
    <cache>/trees/<version>/sglang/...   only the EXTRACT_PATTERNS members, plus a
                                         ``.complete`` marker naming the wheel it came from
    <cache>/trees-full/<version>/sglang/...  the whole ``sglang/`` package (``full=True``,
                                         for benchmarks), same marker

Every write goes to a scratch directory inside the cache and is moved into place with a
single rename, so an interrupted run never leaves a half-written wheel or tree behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

from pdguard.errors import PdguardError
from pdguard.sglang_names import DISAGGREGATION_DIR, ENVIRON_PATH, PACKAGE, VERSION_PATHS
from pdguard.vendor_sglang.manifest import Release, UnknownReleaseError, get_release

# Members extracted from a wheel: a trailing "/" means the whole directory.  Members that a
# wheel lacks (old releases have no environ.py) are simply skipped.
EXTRACT_PATTERNS: tuple[str, ...] = (
    f"{DISAGGREGATION_DIR}/",
    ENVIRON_PATH,
    *reversed(VERSION_PATHS),
)
_REQUIRED_DIR = f"{DISAGGREGATION_DIR}/"
# ``fetch_release(version, full=True)``: the whole package, into its own cache directory.
FULL_PATTERNS: tuple[str, ...] = (f"{PACKAGE}/",)

COMPLETE_MARKER = ".complete"
PIP_TIMEOUT_SECONDS = 900

# Where unpinned versions that only ship platform wheels are looked for (what CI runs on).
_FALLBACK_TAGS = ("cp311", "cp311", "manylinux_2_34_x86_64")

_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!-]*")


class FetchError(PdguardError, RuntimeError):
    """A release could not be downloaded or extracted."""


class WheelHashMismatch(FetchError):
    """The downloaded wheel does not have the sha256 pinned in the manifest."""


class UnsafeWheelError(FetchError):
    """The wheel has a member name that would escape the extraction directory (zip-slip)."""


def cache_dir() -> Path:
    """``$PDGUARD_CACHE``, else ``$XDG_CACHE_HOME/pdguard``, else ``~/.cache/pdguard``."""
    override = os.environ.get("PDGUARD_CACHE")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pdguard"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- pip ---------------------------------------------------------------------------------


def _target_flags(python_tag: str, abi_tag: str, platform_tag: str) -> list[str]:
    interpreter = python_tag.split(".")[0]
    if not re.fullmatch(r"cp\d{2,}", interpreter):
        raise FetchError(f"cannot target python tag {python_tag!r} with pip download")
    digits = interpreter[2:]
    flags: list[str] = []
    for platform in platform_tag.split("."):
        flags += ["--platform", platform]
    flags += ["--python-version", f"{digits[0]}.{digits[1:]}", "--implementation", "cp"]
    for abi in abi_tag.split("."):
        flags += ["--abi", abi]
    return flags


def pip_target_flags(wheel: str) -> list[str]:
    """Flags that make ``pip download`` pick exactly the wheel file named ``wheel``.

    Pure-Python wheels need none; platform wheels get --platform/--python-version/
    --implementation/--abi parsed from the filename's tags.
    """
    parts = wheel.removesuffix(".whl").split("-")
    if not wheel.endswith(".whl") or len(parts) not in (5, 6):
        raise FetchError(f"not a wheel filename: {wheel}")
    python_tag, abi_tag, platform_tag = parts[-3:]
    if platform_tag == "any":
        return []
    return _target_flags(python_tag, abi_tag, platform_tag)


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[-1]


def _pip_download(requirement: str, dest: Path, flags: Sequence[str]) -> None:
    """Run ``pip download`` for one requirement into ``dest``; raise FetchError on failure."""
    _pip("download", ["--dest", str(dest), *flags], requirement)


def _pip(verb: str, options: Sequence[str], requirement: str) -> str:
    """``pip VERB --no-deps --only-binary=:all: OPTIONS REQUIREMENT``: its stdout, or a
    FetchError naming pip's last error line."""
    command = [
        sys.executable,
        "-m",
        "pip",
        verb,
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        *options,
        requirement,
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=PIP_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as error:
        raise FetchError(f"pip {verb} {requirement} timed out") from error
    if result.returncode != 0:
        raise FetchError(f"pip {verb} {requirement} failed: {_last_error_line(result.stderr)}")
    return result.stdout


@contextmanager
def _scratch_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A temporary directory inside ``parent`` (same filesystem, so renames are atomic)."""
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _only_wheel(directory: Path, expected: str | None = None) -> Path:
    found = sorted(path.name for path in directory.iterdir())
    if expected is not None and expected in found:
        return directory / expected
    if expected is None and len(found) == 1 and found[0].endswith(".whl"):
        return directory / found[0]
    wanted = expected or "one wheel"
    raise FetchError(f"pip did not download {wanted} (got: {', '.join(found) or 'nothing'})")


def fetch_wheel(release: Release) -> Path:
    """The verified wheel of ``release`` in ``<cache>/wheels/``, downloading it if needed.

    A cached wheel is re-hashed before use; a corrupt one is deleted and fetched again.
    """
    wheels = cache_dir() / "wheels"
    target = wheels / release.wheel
    if target.is_file():
        if sha256_file(target) == release.sha256:
            return target
        target.unlink()
    with _scratch_dir(wheels, ".download-") as scratch:
        _pip_download(f"sglang=={release.version}", scratch, pip_target_flags(release.wheel))
        downloaded = _only_wheel(scratch, release.wheel)
        actual = sha256_file(downloaded)
        if actual != release.sha256:
            downloaded.unlink()
            raise WheelHashMismatch(
                f"{release.wheel}: expected sha256 {release.sha256}, got {actual}"
            )
        os.replace(downloaded, target)
    return target


# --- extraction --------------------------------------------------------------------------


def _is_wanted(name: str, patterns: Sequence[str] = EXTRACT_PATTERNS) -> bool:
    return any(
        name.startswith(pattern) if pattern.endswith("/") else name == pattern
        for pattern in patterns
    )


def _check_member_name(name: str, wheel: Path) -> None:
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\\" in name
        or "\0" in name
        or re.match(r"[A-Za-z]:", name)
        or ".." in parts
    ):
        raise UnsafeWheelError(f"{wheel.name}: unsafe member name {name!r}")


def extract_members(wheel: Path, dest: Path, patterns: Sequence[str] = EXTRACT_PATTERNS) -> None:
    """Extract the ``patterns`` members (default EXTRACT_PATTERNS) of ``wheel`` into ``dest``.

    Raises UnsafeWheelError if any member name is absolute or contains ``..`` (the whole
    archive is checked before anything is written), and FetchError if the wheel has no
    ``sglang/srt/disaggregation/`` package.
    """
    with zipfile.ZipFile(wheel) as archive:
        members = archive.infolist()
        for info in members:
            _check_member_name(info.filename, wheel)
        wanted = [
            info for info in members if not info.is_dir() and _is_wanted(info.filename, patterns)
        ]
        if not any(info.filename.startswith(_REQUIRED_DIR) for info in wanted):
            raise FetchError(f"{wheel.name} has no {_REQUIRED_DIR} package")
        for info in wanted:
            target = dest.joinpath(*info.filename.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out)


def _tree_path(version: str, full: bool = False) -> Path:
    if not _VERSION_RE.fullmatch(version):
        raise FetchError(f"invalid version string {version!r}")
    return cache_dir() / ("trees-full" if full else "trees") / version


def _read_marker(tree: Path) -> str | None:
    try:
        return (tree / COMPLETE_MARKER).read_text().strip()
    except OSError:
        return None


def _install_tree(
    wheel: Path, tree: Path, marker: str, patterns: Sequence[str] = EXTRACT_PATTERNS
) -> Path:
    """Extract ``wheel`` into a scratch dir next to ``tree`` and rename it into place."""
    with _scratch_dir(tree.parent, f".{tree.name}-") as scratch:
        extract_members(wheel, scratch, patterns)
        (scratch / COMPLETE_MARKER).write_text(marker + "\n")
        if tree.exists():  # incomplete, or extracted from a different wheel
            shutil.rmtree(tree)
        try:
            scratch.rename(tree)
        except OSError:
            if _read_marker(tree) != marker:  # not a concurrent run installing the same tree
                raise
    return tree


def is_cached(version: str, full: bool = False) -> bool:
    """Whether ``fetch_release(version, full)`` would return its tree without downloading."""
    release = get_release(version)
    return _read_marker(_tree_path(version, full)) == f"{release.wheel} sha256={release.sha256}"


def fetch_release(version: str, full: bool = False) -> Path:
    """``<cache>/trees/<version>``: the pinned release's EXTRACT_PATTERNS members; with
    ``full=True``, ``<cache>/trees-full/<version>``: its whole ``sglang/`` package.

    Returns an existing complete tree without downloading anything.
    """
    release = get_release(version)
    tree = _tree_path(version, full)
    marker = f"{release.wheel} sha256={release.sha256}"
    if _read_marker(tree) == marker:
        return tree
    patterns = FULL_PATTERNS if full else EXTRACT_PATTERNS
    return _install_tree(fetch_wheel(release), tree, marker, patterns)


def _pip_index_wheel(requirement: str, flags: Sequence[str]) -> tuple[str, str]:
    """(wheel file name, sha256) of the wheel pip would pick for ``requirement``, as the index
    lists it (its link's ``#sha256=``, PyPI's JSON hash), read from pip's own resolver:
    ``pip install --dry-run --report -`` (the machine's index and proxy settings apply)."""
    with tempfile.TemporaryDirectory(prefix="pdguard-pip-") as target:  # stays empty
        # --target: pip takes --platform/--abi (the fallback's) only with it
        options = ["--dry-run", "--ignore-installed", "--quiet", "--report", "-", *flags]
        stdout = _pip("install", [*options, "--target", target], requirement)
    try:
        info = json.loads(stdout)["install"][0]["download_info"]
        url = str(info["url"])
        sha256 = str(info["archive_info"]["hashes"]["sha256"])
    except (ValueError, LookupError, TypeError) as error:
        raise FetchError(f"{requirement}: the index gives no sha256 for its wheel") from error
    return unquote(url.rsplit("/", 1)[-1].split("#", 1)[0]), sha256


def fetch_unpinned(version: str) -> Path:
    """Like :func:`fetch_release` for a version that is not in the manifest: the wheel the
    index lists (a plain wheel first, then the cp311 manylinux_2_34_x86_64 wheel for versions
    that only ship platform wheels), downloaded with pip and refused unless its sha256 is the
    one the index gives (``_pip_index_wheel``). The cache marker records the wheel and its
    sha256 (``wheel_of``). A pinned version goes through fetch_release."""
    try:
        get_release(version)
    except UnknownReleaseError:
        pass
    else:
        return fetch_release(version)
    tree = _tree_path(version)
    if _read_marker(tree) is not None:
        return tree
    requirement = f"sglang=={version}"
    attempts: list[Sequence[str]] = [[], _target_flags(*_FALLBACK_TAGS)]
    failures: list[FetchError] = []
    with _scratch_dir(cache_dir() / "wheels", ".download-") as scratch:
        for flags in attempts:
            try:
                name, expected = _pip_index_wheel(requirement, flags)
                _pip_download(requirement, scratch, flags)
                break
            except FetchError as error:
                failures.append(error)
        else:
            raise failures[0]  # the plain wheel's: "no matching distribution" for no release
        wheel = _only_wheel(scratch, name)
        actual = sha256_file(wheel)
        if actual != expected:
            raise WheelHashMismatch(
                f"{wheel.name}: the index gives sha256 {expected}, the download has {actual}"
            )
        marker = f"{wheel.name} sha256={actual} unpinned, checked against the index"
        return _install_tree(wheel, tree, marker)


def wheel_of(tree: Path) -> tuple[str, str] | None:
    """(wheel file name, sha256) a fetched tree was extracted from, from its cache marker."""
    marker = _read_marker(tree)
    match = re.match(r"(\S+) sha256=([0-9a-f]{64})", marker or "")
    return (match.group(1), match.group(2)) if match else None
