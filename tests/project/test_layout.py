"""pdguard installs from the checkout without symlinks: the top-level checks/, codemods/ and
vendor_sglang/ become pdguard.checks, pdguard.codemods and pdguard.vendor_sglang in a wheel
(pyproject.toml's package-dir mapping) and in this (editable) install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pdguard.checks
import pdguard.codemods
import pdguard.vendor_sglang
from pdguard.layout import MAPPED, source_dirs
from tests.paths import ROOT


def test_the_editable_install_maps_the_top_level_folders() -> None:
    dirs = source_dirs()
    for name in MAPPED:
        # a strict editable install reads them through its link tree: the same files
        assert (dirs[f"pdguard.{name}"] / "__init__.py").resolve() == ROOT / name / "__init__.py"
    assert Path(pdguard.checks.__file__ or "").resolve() == ROOT / "checks" / "__init__.py"
    assert pdguard.codemods.__name__ == "pdguard.codemods"
    assert pdguard.vendor_sglang.manifest.MANIFEST_PATH.is_file()


def test_a_wheel_holds_the_mapped_packages_and_the_manifest(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("pdguard-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in MAPPED:
        expected = {
            f"pdguard/{name}/{p.relative_to(ROOT / name).as_posix()}"
            for p in (ROOT / name).rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert expected <= names, name
    assert {"pdguard/vendor_sglang/releases.toml", "pdguard/py.typed"} <= names
    assert not any(n.split("/")[0] in MAPPED for n in names)  # no top-level checks/ etc.


def test_the_cli_runs_from_another_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pdguard", "rule", "PDG001"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "(PDG001)" in done.stdout.splitlines()[0]
