"""Tests for vendor_sglang: the release manifest, the wheel fetcher and its CLI."""

from __future__ import annotations

import hashlib
import re
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from pdguard.vendor_sglang import (
    FetchError,
    Release,
    UnknownReleaseError,
    UnsafeWheelError,
    WheelHashMismatch,
    cache_dir,
    extract_members,
    fetch,
    fetch_release,
    fetch_unpinned,
    fetch_wheel,
    get_release,
    load_manifest,
)
from pdguard.vendor_sglang.__main__ import main
from pdguard.vendor_sglang.manifest import version_key

FAMILIES = [f"F{n}" for n in range(1, 13)]

GOOD_MEMBERS = {
    "sglang/version.py": "__version__ = '0.0.1'\n",
    "sglang/srt/environ.py": "# environ\n",
    "sglang/srt/disaggregation/prefill.py": "# prefill\n",
    "sglang/srt/disaggregation/base/conn.py": "# conn\n",
    "sglang/srt/managers/scheduler.py": "# not extracted\n",
    "sglang/__init__.py": "# not extracted\n",
}


def make_zip(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("PDGUARD_CACHE", str(root))
    return root


@pytest.fixture
def good_wheel(tmp_path: Path) -> bytes:
    return make_zip(tmp_path / "good.whl", GOOD_MEMBERS).read_bytes()


@pytest.fixture
def fake_release(good_wheel: bytes) -> Release:
    digest = hashlib.sha256(good_wheel).hexdigest()
    return Release("0.0.1", "F1", "sglang-0.0.1-py3-none-any.whl", digest, ci=False)


def install_fake_pip(
    monkeypatch: pytest.MonkeyPatch, filename: str, content: bytes
) -> list[tuple[str, list[str]]]:
    """Replace the pip call with one that 'downloads' ``content``; return the recorded calls."""
    calls: list[tuple[str, list[str]]] = []

    def fake(requirement: str, dest: Path, flags: Sequence[str]) -> None:
        calls.append((requirement, list(flags)))
        (dest / filename).write_bytes(content)

    monkeypatch.setattr(fetch, "_pip_download", fake)
    return calls


# --- manifest ------------------------------------------------------------------------------


def test_manifest_has_62_releases_in_version_order() -> None:
    releases = load_manifest()
    assert len(releases) == 62
    versions = [r.version for r in releases]
    assert len(set(versions)) == len(versions)
    assert versions == sorted(versions, key=version_key)
    assert versions[0] == "0.4.6"


def test_every_family_has_a_ci_release() -> None:
    releases = load_manifest()
    assert {r.family for r in releases} == set(FAMILIES)
    for family in FAMILIES:
        assert any(r.ci for r in releases if r.family == family), family


def test_manifest_hashes_and_wheel_names() -> None:
    for release in load_manifest():
        assert re.fullmatch(r"[0-9a-f]{64}", release.sha256), release.version
        assert release.wheel.startswith(f"sglang-{release.version}-"), release.version
        assert release.wheel.endswith(".whl")


def test_get_release() -> None:
    release = get_release("0.4.6")
    assert release.family == "F1"
    assert release.ci is True
    assert release.wheel == "sglang-0.4.6-py3-none-any.whl"


def test_unknown_release() -> None:
    with pytest.raises(UnknownReleaseError) as info:
        get_release("9.9")
    assert str(info.value) == "sglang 9.9 is not pinned in vendor_sglang/releases.toml"
    assert isinstance(info.value, ValueError)


def test_version_key_orders_post_releases() -> None:
    assert version_key("0.4.6") < version_key("0.4.6.post1") < version_key("0.4.7")
    assert version_key("0.5.9") < version_key("0.5.10")


# --- cache dir and pip flags ---------------------------------------------------------------


def test_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PDGUARD_CACHE", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("PDGUARD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "pdguard"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "pdguard"


def test_pip_target_flags() -> None:
    assert fetch.pip_target_flags("sglang-0.4.6-py3-none-any.whl") == []
    assert fetch.pip_target_flags("sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl") == [
        "--platform",
        "manylinux_2_34_x86_64",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
    ]


def test_pip_command_for_platform_wheel(
    monkeypatch: pytest.MonkeyPatch, cache: Path, good_wheel: bytes
) -> None:
    release = Release(
        "0.5.11",
        "F6",
        "sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl",
        hashlib.sha256(good_wheel).hexdigest(),
        ci=True,
    )
    commands: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        dest = Path(command[command.index("--dest") + 1])
        (dest / release.wheel).write_bytes(good_wheel)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", fake_run)
    path = fetch_wheel(release)
    assert path == cache / "wheels" / release.wheel
    [command] = commands
    assert command[1:6] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    assert command[-1] == "sglang==0.5.11"
    assert Path(command[command.index("--dest") + 1]).parent == cache / "wheels"
    assert command[command.index("--platform") + 1] == "manylinux_2_34_x86_64"
    assert command[command.index("--python-version") + 1] == "3.11"
    assert command[command.index("--abi") + 1] == "cp311"


def test_pip_failure_reports_last_error_line(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release
) -> None:
    stderr = (
        "WARNING: Location 'file:///opt/pypi/simple/sglang/' is ignored\n"
        "ERROR: Could not find a version that satisfies the requirement sglang==0.0.1\n"
        "ERROR: No matching distribution found for sglang==0.0.1\n"
    )

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", stderr)

    monkeypatch.setattr(fetch.subprocess, "run", fake_run)
    with pytest.raises(FetchError, match=r"No matching distribution found for sglang==0\.0\.1$"):
        fetch_wheel(fake_release)
    assert list((cache / "wheels").iterdir()) == []


# --- wheel hashes --------------------------------------------------------------------------


def test_cached_wheel_is_used_without_pip(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release, good_wheel: bytes
) -> None:
    cached = cache / "wheels" / fake_release.wheel
    cached.parent.mkdir(parents=True)
    cached.write_bytes(good_wheel)
    calls = install_fake_pip(monkeypatch, fake_release.wheel, b"unused")
    assert fetch_wheel(fake_release) == cached
    assert calls == []


def test_corrupt_cached_wheel_is_fetched_again(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release, good_wheel: bytes
) -> None:
    cached = cache / "wheels" / fake_release.wheel
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"truncated download")
    calls = install_fake_pip(monkeypatch, fake_release.wheel, good_wheel)
    assert fetch_wheel(fake_release) == cached
    assert cached.read_bytes() == good_wheel
    assert calls == [("sglang==0.0.1", [])]


def test_hash_mismatch_is_rejected(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release
) -> None:
    cached = cache / "wheels" / fake_release.wheel
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"corrupt")
    tampered = b"not the pinned wheel"
    install_fake_pip(monkeypatch, fake_release.wheel, tampered)
    with pytest.raises(WheelHashMismatch) as info:
        fetch_wheel(fake_release)
    message = str(info.value)
    assert fake_release.wheel in message
    assert fake_release.sha256 in message
    assert hashlib.sha256(tampered).hexdigest() in message
    assert list((cache / "wheels").iterdir()) == []  # bad file deleted, no scratch dir left


def test_pip_downloading_another_file_is_an_error(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release, good_wheel: bytes
) -> None:
    install_fake_pip(monkeypatch, "sglang-0.0.1-cp311-cp311-manylinux_2_34_x86_64.whl", good_wheel)
    with pytest.raises(FetchError, match="did not download"):
        fetch_wheel(fake_release)


# --- extraction ----------------------------------------------------------------------------


def test_extract_members_only_takes_the_patterns(tmp_path: Path) -> None:
    wheel = make_zip(tmp_path / "w.whl", GOOD_MEMBERS)
    dest = tmp_path / "out"
    extract_members(wheel, dest)
    assert files_under(dest) == {
        "sglang/version.py",
        "sglang/srt/environ.py",
        "sglang/srt/disaggregation/prefill.py",
        "sglang/srt/disaggregation/base/conn.py",
    }
    assert (dest / "sglang/srt/disaggregation/prefill.py").read_text() == "# prefill\n"


def test_extract_members_without_environ(tmp_path: Path) -> None:
    members = {"sglang/srt/disaggregation/decode.py": "# decode\n", "sglang/version.py": ""}
    dest = tmp_path / "out"
    extract_members(make_zip(tmp_path / "old.whl", members), dest)
    assert files_under(dest) == set(members)


def test_extract_members_requires_disaggregation(tmp_path: Path) -> None:
    wheel = make_zip(tmp_path / "w.whl", {"sglang/version.py": ""})
    with pytest.raises(FetchError, match="no sglang/srt/disaggregation/"):
        extract_members(wheel, tmp_path / "out")


@pytest.mark.parametrize(
    "evil",
    [
        "sglang/srt/disaggregation/../../../../escaped.py",
        "../escaped.py",
        "/tmp/escaped.py",
        "C:/escaped.py",
        "sglang\\..\\..\\escaped.py",
    ],
)
def test_zip_slip_is_rejected(tmp_path: Path, evil: str) -> None:
    wheel = make_zip(tmp_path / "evil.whl", {**GOOD_MEMBERS, evil: "pwned\n"})
    dest = tmp_path / "a" / "b" / "out"
    with pytest.raises(UnsafeWheelError, match="unsafe member name"):
        extract_members(wheel, dest)
    assert not dest.exists()
    assert not any(p.name == "escaped.py" for p in tmp_path.rglob("*"))


# --- trees ---------------------------------------------------------------------------------


def test_fetch_release_builds_a_complete_tree(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release, good_wheel: bytes
) -> None:
    monkeypatch.setattr(fetch, "get_release", lambda version: fake_release)
    calls = install_fake_pip(monkeypatch, fake_release.wheel, good_wheel)
    tree = fetch_release("0.0.1")
    assert tree == cache / "trees" / "0.0.1"
    assert (tree / ".complete").is_file()
    assert "sglang/srt/disaggregation/prefill.py" in files_under(tree)
    assert not (tree / "sglang/srt/managers").exists()
    assert [p.name for p in (cache / "trees").iterdir()] == ["0.0.1"]  # no scratch dirs left

    # A complete tree is returned as is, even with the wheel gone from the cache.
    (cache / "wheels" / fake_release.wheel).unlink()
    assert fetch_release("0.0.1") == tree
    assert len(calls) == 1


def test_incomplete_tree_is_replaced(
    monkeypatch: pytest.MonkeyPatch, cache: Path, fake_release: Release, good_wheel: bytes
) -> None:
    monkeypatch.setattr(fetch, "get_release", lambda version: fake_release)
    install_fake_pip(monkeypatch, fake_release.wheel, good_wheel)
    stale = cache / "trees" / "0.0.1"
    (stale / "sglang").mkdir(parents=True)
    (stale / "sglang" / "leftover.py").write_text("")
    tree = fetch_release("0.0.1")
    assert tree == stale
    assert not (tree / "sglang" / "leftover.py").exists()
    assert (tree / ".complete").is_file()


def test_fetch_unpinned_falls_back_to_platform_wheel(
    monkeypatch: pytest.MonkeyPatch, cache: Path, good_wheel: bytes
) -> None:
    calls: list[list[str]] = []

    def fake(requirement: str, dest: Path, flags: Sequence[str]) -> None:
        calls.append(list(flags))
        if not flags:
            raise FetchError("pip download failed: ERROR: No matching distribution found")
        (dest / "sglang-0.0.2-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(good_wheel)

    def index(requirement: str, flags: Sequence[str]) -> tuple[str, str]:
        if not flags:
            raise FetchError("pip cannot find sglang==0.0.2: no matching distribution")
        return "sglang-0.0.2-cp311-cp311-manylinux_2_34_x86_64.whl", hashlib.sha256(
            good_wheel
        ).hexdigest()

    monkeypatch.setattr(fetch, "_pip_download", fake)
    monkeypatch.setattr(fetch, "_pip_index_wheel", index)
    tree = fetch_unpinned("0.0.2")
    assert tree == cache / "trees" / "0.0.2"
    assert "sglang/srt/disaggregation/prefill.py" in files_under(tree)
    assert calls == [fetch.pip_target_flags("sglang-0.0.2-cp311-cp311-manylinux_2_34_x86_64.whl")]
    assert fetch.wheel_of(tree) == (
        "sglang-0.0.2-cp311-cp311-manylinux_2_34_x86_64.whl",
        hashlib.sha256(good_wheel).hexdigest(),
    )


def test_fetch_unpinned_refuses_a_wheel_the_index_gives_another_sha256(
    monkeypatch: pytest.MonkeyPatch, cache: Path, good_wheel: bytes
) -> None:
    name = "sglang-0.0.3-py3-none-any.whl"
    monkeypatch.setattr(fetch, "_pip_index_wheel", lambda requirement, flags: (name, "0" * 64))
    monkeypatch.setattr(
        fetch,
        "_pip_download",
        lambda requirement, dest, flags: (dest / name).write_bytes(good_wheel),
    )
    with pytest.raises(WheelHashMismatch, match="the index gives sha256 0000"):
        fetch_unpinned("0.0.3")
    assert not (cache / "trees" / "0.0.3").exists()


def test_fetch_unpinned_rejects_path_like_versions(cache: Path) -> None:
    with pytest.raises(FetchError, match="invalid version"):
        fetch_unpinned("../../etc")


# --- CLI -----------------------------------------------------------------------------------


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 62
    assert lines[0].split() == ["0.4.6", "F1", "ci=true"]


def test_cli_unknown_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", "9.9"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "vendor_sglang: error: sglang 9.9 is not pinned in vendor_sglang/releases.toml"
    ]


def test_cli_fetch_failure(
    monkeypatch: pytest.MonkeyPatch, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(requirement: str, dest: Path, flags: Sequence[str]) -> None:
        raise FetchError(f"pip download {requirement} failed: ERROR: network down")

    monkeypatch.setattr(fetch, "_pip_download", failing)
    assert main(["fetch", "0.4.6"]) == 2
    assert "ERROR: network down" in capsys.readouterr().err


def test_cli_fetch_selection(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import pdguard.vendor_sglang.__main__ as cli

    monkeypatch.setattr(cli, "fetch_release", lambda version: tmp_path / version)
    assert main(["fetch", "--ci", "0.4.6.post1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    versions = [line.split()[0] for line in lines]
    assert "0.4.6.post1" in versions
    assert {r.version for r in load_manifest() if r.ci} <= set(versions)
    assert versions == sorted(versions, key=version_key)
    assert lines[0] == f"0.4.6 {tmp_path / '0.4.6'}"


# --- real network (through pip) ------------------------------------------------------------


@pytest.mark.releases
def test_fetch_real_release_0_4_6(cache: Path) -> None:
    tree = fetch_release("0.4.6")
    assert tree == cache / "trees" / "0.4.6"
    assert (tree / "sglang/srt/disaggregation/prefill.py").is_file()
    assert (tree / "sglang/version.py").is_file()
    assert not (tree / "sglang/srt/managers").exists()
    extracted = files_under(tree) - {".complete"}
    assert extracted
    for name in extracted:
        assert name.startswith("sglang/srt/disaggregation/") or name in {
            "sglang/srt/environ.py",
            "sglang/version.py",
        }, name
    wheel = cache / "wheels" / "sglang-0.4.6-py3-none-any.whl"
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == get_release("0.4.6").sha256


@pytest.mark.releases
def test_the_index_gives_the_pinned_wheel_and_sha256() -> None:
    """What fetch_unpinned checks a download against is the index's hash: for a pinned release
    (a platform wheel, through the fallback flags) it is releases.toml's."""
    release = get_release("0.5.23")
    flags = fetch._target_flags(*fetch._FALLBACK_TAGS)
    assert fetch._pip_index_wheel("sglang==0.5.23", flags) == (release.wheel, release.sha256)
