"""The mutant generator of tests/mutants.py on the patched toy prefill of tests/snippets.py, no
network needed: every prefill mutant applies, still compiles, and ``pdguard check`` reports it
with its code; the correct variants check clean. (tests/commands/test_check_releases.py does
the same on real releases.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard import checks
from pdguard.checks.project import PREFILL, Project
from pdguard.commands import apply as pipeline
from pdguard.commands.check import load_project
from pdguard.tree import open_tree
from tests.mutants import DECODE_MUTANTS, MUTANT, MUTANTS, NIXL, VARIANTS, mutate_tree
from tests.snippets import make_toy

# PDG004's act on NIXL's sender; the requeue one needs a path that takes requests out and back
NEEDS_REQUEUE = "first stamp kept across a requeue"
NEEDS_PARKED = "deadline counts parked time"  # 0.5.16+: the toy parks nothing
NEEDS_PARKED_PP = "deadline skips every parked request"  # parked requests and PP
# pdguard's sender-abort change in NIXL's poll() (up to 0.5.11): the toy has no sender
ABORT_IGNORED = "poll() ignores abort() again"
NEEDS_PP = "deadline ignores the PP stage's own poll"  # rids_to_check: the toy has no PP
# the patch imports no os (get_int_env_var reads the timeout, as the release reads its siblings)
NEEDS_OS = "import os removed"
PREFILL_MUTANTS = [
    m
    for m in MUTANTS
    if m.expected not in ("PDG004", "PDG006", "PDG007", "PDG008")
    and m.name not in (NEEDS_REQUEUE, NEEDS_PARKED, NEEDS_PARKED_PP, NEEDS_PP, NEEDS_OS)
]
REQUEUE = """
    def optimistic_release_and_requeue(self, req):
        req.reset_for_retract()
        self.waiting_queue.insert(0, req)
"""


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = make_toy(tmp_path / "toy")
    pipeline.write(pipeline.plan(open_tree(root)))
    return root


@pytest.mark.parametrize("mutant", PREFILL_MUTANTS, ids=lambda m: m.name)
def test_mutant_is_reported_on_the_toy(toy: Path, mutant) -> None:
    before = (toy / PREFILL).read_text()
    mutate_tree(toy, mutant)
    after = (toy / PREFILL).read_text()
    assert after != before
    compile(after, PREFILL, "exec")
    codes = {f.code for f in checks.run(load_project(open_tree(toy)))}
    assert mutant.expected in codes, codes


def test_sender_mutants_need_a_sender(toy: Path) -> None:
    texts = load_project(open_tree(toy)).texts
    assert NIXL not in texts
    assert [m.name for m in MUTANTS if m.mutate(texts) is None] == [
        NEEDS_PARKED,
        NEEDS_PARKED_PP,
        NEEDS_REQUEUE,
        NEEDS_PP,
        ABORT_IGNORED,
        "init_time removed",
        "bootstrap check removed",
        NEEDS_OS,
        # the toy has no decode side: tests/commands/test_check_releases.py runs these on releases
        *(m.name for m in DECODE_MUTANTS),
    ]


def test_first_stamp_kept_is_reported_where_requests_come_back(toy: Path) -> None:
    texts = load_project(open_tree(toy)).texts
    with_requeue = {**texts, PREFILL: texts[PREFILL] + REQUEUE}
    assert checks.run(Project(with_requeue), ["PDG003"]) == []
    mutated = MUTANT[NEEDS_REQUEUE].mutate(with_requeue)
    assert mutated is not None
    compile(mutated[PREFILL], PREFILL, "exec")
    messages = [f.message for f in checks.run(Project(mutated), ["PDG003"])]
    assert messages and all("optimistic_release_and_requeue() (line" in m for m in messages)


@pytest.mark.parametrize(("name", "variant"), VARIANTS, ids=[n for n, _ in VARIANTS])
def test_correct_variant_is_clean_on_the_toy(toy: Path, name: str, variant) -> None:
    texts = load_project(open_tree(toy)).texts
    assert checks.run(Project(texts)) == []
    changed = variant(texts)
    assert changed is not None, name
    compile(changed[PREFILL], PREFILL, "exec")
    assert checks.run(Project(changed)) == [], name
