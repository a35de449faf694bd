"""``pdguard check`` on real releases: what unpatched releases report, that ``apply`` then
``check`` is clean, and mutation testing of the patched code (plus correct variants that must
stay clean)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.checks.project import Project
from pdguard.commands import apply
from pdguard.commands.check import load_project
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.mutants import MUTANTS, VARIANTS
from tests.test_releases import RELEASES

pytestmark = pytest.mark.releases

NIXL_BROKEN = {"F3", "F4", "F5", "F6", "F7", "F8", "F9"}  # 0.4.7 - 0.5.17
MOONCAKE_BROKEN = {
    "0.4.6",
    "0.4.6.post1",
    "0.4.6.post2",
    "0.4.6.post3",
    "0.4.6.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.7.post1",
    "0.4.8",
}


# The prefill rules. PDG006/PDG007 (decode side) still report unpatched decode code after
# ``apply``, which fixes the prefill side only: tests/test_decode_rules.py asserts those.
PREFILL_CODES = ("PDG001", "PDG002", "PDG003", "PDG004", "PDG005")


def _codes_by_symbol(findings: list[checks.Finding]) -> set[tuple[str, str]]:
    return {(f.code, f.symbol) for f in findings}


@pytest.fixture(params=RELEASES, ids=lambda r: r.version)
def release_tree(request: pytest.FixtureRequest, tmp_path: Path):
    copy = tmp_path / f"sglang-{request.param.version}"
    shutil.copytree(fetch_release(request.param.version), copy)
    return request.param, copy


def test_unpatched_release_findings(release_tree) -> None:
    info, root = release_tree
    findings = checks.run(load_project(open_tree(root)), PREFILL_CODES)
    found = _codes_by_symbol(findings)
    # No release has an inflight deadline.
    assert any(code == "PDG001" for code, _ in found)
    assert (("PDG004", "NixlKVSender.poll") in found) == (info.family in NIXL_BROKEN)
    assert (("PDG004", "MooncakeKVSender.poll") in found) == (info.version in MOONCAKE_BROKEN)
    assert {code for code, _ in found} <= {"PDG001", "PDG004"}


# apply refuses 0.4.6 - 0.4.6.post4 (their Failed branch raises): nothing to check after it.
PATCHABLE = [r for r in RELEASES if r.family != "F1"]


@pytest.fixture(params=PATCHABLE, ids=lambda r: r.version)
def patched(request: pytest.FixtureRequest, tmp_path: Path):
    info = request.param
    root = tmp_path / f"sglang-{info.version}"
    shutil.copytree(fetch_release(info.version), root)
    result = apply.plan(open_tree(root))
    assert not result.refused
    apply.write(result)
    return info, load_project(open_tree(root)).texts


def test_apply_then_check_is_clean(patched) -> None:
    _, texts = patched
    assert checks.run(Project(texts), PREFILL_CODES) == []


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_reported(patched, mutant) -> None:
    info, texts = patched
    mutated = mutant.mutate(texts)
    if mutated is None:
        # Only where the fix has nothing to mutate: NIXL already fixed upstream (0.5.18+), or
        # the module was imported by the release itself (the mutant would not compile either).
        assert mutant.expected in ("PDG004", "PDG005"), mutant.name
        return
    codes = {f.code for f in checks.run(Project(mutated))}
    assert mutant.expected in codes, f"{info.version}: {mutant.name} not reported ({codes})"


@pytest.mark.parametrize(("name", "variant"), VARIANTS, ids=[n for n, _ in VARIANTS])
def test_correct_variant_is_clean(patched, name, variant) -> None:
    info, texts = patched
    changed = variant(texts)
    assert changed is not None, name
    assert checks.run(Project(changed), PREFILL_CODES) == [], f"{info.version}: {name}"
