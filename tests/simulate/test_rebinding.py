"""Code that binds a method of a loaded class again, after its ``def``: run in the sandbox as
importing the module would, or reported as unmodelled (exit 2, one line), never silently
skipped. Each tree is the corpus's correct prefill module (``tests/corpus.py``) whose deadline
helper ``_expire_inflight`` is made a no-op in another way: as Python builds the class, the
request then waits for ever, and ``wedge`` must show it."""

from __future__ import annotations

import pytest

from pdguard.errors import LoadError
from pdguard.simulate import run_unguarded
from pdguard.simulate.confirm import TextTree
from tests import corpus

MIXIN = "SchedulerDisaggregationPrefillMixin"
PATCHES = "sglang/srt/disaggregation/fork_patches.py"
NO_OP = "lambda self: None"
_IMPORT = f"from sglang.srt.disaggregation.prefill import {MIXIN}\n\n\n"
_DECORATOR = "\n\ndef _retired(function):\n    return lambda self: None\n"

REBOUND = {
    "module-level-assignment": {
        corpus.PREFILL: corpus.prefill() + f"\n\n{MIXIN}._expire_inflight = {NO_OP}\n"
    },
    "module-level-setattr": {
        corpus.PREFILL: corpus.prefill() + f'\n\nsetattr({MIXIN}, "_expire_inflight", {NO_OP})\n'
    },
    "class-body-assignment": {
        corpus.PREFILL: corpus.prefill() + f"\n    _expire_inflight = {NO_OP}\n"
    },
    "decorator-replacing-it": {
        corpus.PREFILL: corpus.prefill(extra=_DECORATOR).replace(
            "    def _expire_inflight", "    @_retired\n    def _expire_inflight"
        )
    },
    "from-another-module": {
        corpus.PREFILL: corpus.prefill(),
        PATCHES: _IMPORT
        + f"def _skip(self):\n    return None\n\n\n{MIXIN}._expire_inflight = _skip\n",
    },
    "setattr-from-another-module": {
        corpus.PREFILL: corpus.prefill(),
        PATCHES: _IMPORT + f'setattr({MIXIN}, "_expire_inflight", {NO_OP})\n',
    },
}


def _wedge(files: dict[str, str]) -> str:
    report = run_unguarded(TextTree(files), names=["wedge"])
    (row,) = report.rows
    return f"{row.verdict}: {row.observed}"


def test_the_tree_unrebound_is_bounded() -> None:
    assert _wedge({corpus.PREFILL: corpus.prefill()}).startswith("pass: failed at 30")


@pytest.mark.parametrize("name", sorted(REBOUND))
def test_a_rebinding_is_run_as_importing_would(name: str) -> None:
    assert _wedge(REBOUND[name]).startswith("fail: still waiting after 600 simulated seconds"), name


def test_a_rebinding_from_another_module_inside_a_block_is_unmodelled() -> None:
    files = {
        corpus.PREFILL: corpus.prefill(),
        PATCHES: "import os\n\n" + _IMPORT + "if os.environ.get('FORK_RETIRE'):\n"
        f"    {MIXIN}._expire_inflight = {NO_OP}\n",
    }
    with pytest.raises(LoadError) as info:
        _wedge(files)
    message = str(info.value)
    assert message.startswith(f"{PATCHES}:7: cannot load: module-level code rebinds")
    assert "(unmodelled)" in message and "\n" not in message


def test_a_module_that_only_imports_the_class_adds_nothing() -> None:
    files = {corpus.PREFILL: corpus.prefill(), PATCHES: _IMPORT + "USED = " + MIXIN + "\n"}
    assert _wedge(files).startswith("pass: ")
