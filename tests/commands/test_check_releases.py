"""``pdguard check`` on real releases: what unpatched releases report, that ``apply`` then
``check`` is clean, and mutation testing of the patched code (plus correct variants that must
stay clean)."""

from __future__ import annotations

import ast

import pytest

from pdguard import checks
from pdguard.checks.models.inflight import analyse
from pdguard.checks.project import PREFILL, Project
from pdguard.commands.check import load_project
from pdguard.sglang_names import PP_CONSENSUS_PARAM
from pdguard.tree import open_tree
from tests.helpers import MOONCAKE_STUCK, NIXL_STUCK
from tests.mutants import DECODE_MARKER, MUTANTS, NIXL, RECEIVER_MARKER, VARIANTS
from tests.project.test_mutants import ABORT_IGNORED, NEEDS_PP

pytestmark = pytest.mark.releases


# The prefill rules. PDG006/PDG007 (decode side) still report unpatched decode code after
# ``apply``, which fixes the prefill side only: tests/checks/rules/test_decode_rules.py
# asserts those.
# The prefill side (PDG006/PDG007 check the decode side, which the prefill fixes leave as is).
PREFILL_CODES = ("PDG000", "PDG001", "PDG002", "PDG003", "PDG004", "PDG005", "PDG008")
DECODE_CODES = ("PDG006", "PDG007")  # the decode fixes' mutants


def _codes_by_symbol(findings: list[checks.Finding]) -> set[tuple[str, str]]:
    return {(f.code, f.symbol) for f in findings}


def test_unpatched_release_findings(release_copy) -> None:
    info, root = release_copy
    findings = checks.run(load_project(open_tree(root)), PREFILL_CODES)
    found = _codes_by_symbol(findings)
    # No release has an inflight deadline.
    assert any(code == "PDG001" for code, _ in found)
    assert (("PDG004", "NixlKVSender.poll") in found) == (info.family in NIXL_STUCK)
    assert (("PDG004", "MooncakeKVSender.poll") in found) == (info.version in MOONCAKE_STUCK)
    assert {code for code, _ in found} <= {"PDG001", "PDG004"}


@pytest.fixture
def patched(patched_release):
    """(release, the texts of its patched tree), for every release apply patches (not F1:
    0.4.6 - 0.4.6.post4, whose Failed branch raises)."""
    info, root = patched_release
    return info, load_project(open_tree(root)).texts


def test_apply_then_check_is_clean(patched) -> None:
    _, texts = patched
    assert checks.run(Project(texts), PREFILL_CODES) == []


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_reported(patched, mutant) -> None:
    info, texts = patched
    mutated = mutant.mutate(texts)
    if mutated is None:
        # Only where the fix has nothing to mutate: NIXL already fixed upstream (0.5.18+), the
        # module was imported by the release itself (the mutant would not compile either), or
        # no path takes requests out of the queue and back (before optimistic prefill, 0.5.13).
        if mutant.name == "first stamp kept across a requeue":
            model = analyse(ast.parse(texts[PREFILL]))
            assert model is not None and not model.send_backs, info.version
            return
        if mutant.name in ("deadline counts parked time", "deadline skips every parked request"):
            model = analyse(ast.parse(texts[PREFILL]))
            assert model is not None and not model.parked_line, info.version
            return
        if mutant.name == NEEDS_PP:  # no PP prefill loop: the helper takes no consensus
            helper = next(
                n
                for n in ast.walk(ast.parse(texts[PREFILL]))
                if isinstance(n, ast.FunctionDef) and n.name == "_fail_timed_out_inflight_reqs"
            )
            assert PP_CONSENSUS_PARAM not in {a.arg for a in helper.args.args}, info.version
            return
        if mutant.name == ABORT_IGNORED:
            # NIXL's poll() honours abort() upstream from 0.5.12: sender-abort left its poll()
            # alone (on 0.5.12 - 0.5.12.post1 it changes failure_exception() only)
            nixl = texts.get(NIXL, "")
            for piece in ("once aborted", "set by abort()", "poll() reports Failed"):
                assert f"# pdguard: sender-abort: {piece}" not in nixl, (info.version, piece)
            return
        if mutant.expected in DECODE_CODES:
            # the decode fixes wrote nothing there (upstream already bounds it, or the
            # mutant needs a piece only some releases get: the pending bound 0.5.10+, NIXL's
            # heartbeat 0.5.3 - 0.5.5.post3, a manager that cannot record Failed)
            if mutant.always_in is not None:
                fix = RECEIVER_MARKER if mutant.expected == "PDG006" else DECODE_MARKER
                assert fix not in texts.get(mutant.always_in, ""), mutant.name
            return
        assert mutant.expected in ("PDG004", "PDG005"), mutant.name
        return
    codes = {f.code for f in checks.run(Project(mutated), (*PREFILL_CODES, *DECODE_CODES))}
    assert mutant.expected in codes, f"{info.version}: {mutant.name} not reported ({codes})"


@pytest.mark.parametrize(("name", "variant"), VARIANTS, ids=[n for n, _ in VARIANTS])
def test_correct_variant_is_clean(patched, name, variant) -> None:
    info, texts = patched
    changed = variant(texts)
    assert changed is not None, name
    assert checks.run(Project(changed), PREFILL_CODES) == [], f"{info.version}: {name}"
