"""How the inflight deadline reads ``SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT``, in each release's
convention: the env registry entry (``InflightTimeoutEntry`` on a hand-written registry), the fix
on both files of a real release (present, partial, idempotent), and a value that is not a whole
number of seconds, run through the release's own code in ``simulate``."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import black
import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.checks.models.inflight import analyse
from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.inflight_timeout import InflightTimeoutEntry
from pdguard.commands import apply as pipeline
from pdguard.fixes import Outcome
from pdguard.simulate import load as load_target
from pdguard.simulate.prefill import scenarios, world
from pdguard.simulate.spec import RequestSpec
from pdguard.tree import open_tree
from tests.helpers import copy_release, patched_copy

PREFILL = "sglang/srt/disaggregation/prefill.py"
ENVIRON = "sglang/srt/environ.py"
ENV = "SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT"

# A registry in the shape of SGLang's environ.py, in our own words.
REGISTRY = '''\
"""Settings read from the environment, each with a type and a default."""


class Setting:
    def __init__(self, default):
        self.default = default


class IntSetting(Setting):
    pass


class FloatSetting(Setting):
    pass


class Registry:
    # transfer engine
    SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT = IntSetting(300)
    SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL = FloatSetting(5.0)
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = IntSetting(300)
    SGLANG_DISAGGREGATION_NIXL_BACKEND = "UCX"

    # elsewhere
    SGLANG_SOMETHING_ELSE = IntSetting(1)


registry = Registry()
'''


def _entry_source(entry_type: str) -> str:
    return REGISTRY.replace("IntSetting", entry_type)


class TestInflightTimeoutEntry(CodemodTest):
    TRANSFORM = InflightTimeoutEntry

    def test_before_after(self) -> None:
        before = _entry_source("EnvInt")
        after = before.replace(
            "    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)\n",
            "    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)\n"
            "    # pdguard: inflight-deadline: seconds a request may wait in the prefill\n"
            "    # inflight queue for its KV transfer before it is failed; 0 (or less) "
            "turns it off.\n"
            "    SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT = EnvInt(300)\n",
        )
        self.assertCodemod(before, after)
        assert black.format_str(after, mode=black.Mode()) == after


def _entry(code: str) -> str:
    module = cst.parse_module(code)
    return InflightTimeoutEntry(CodemodContext()).transform_module(module).code


def test_entry_follows_the_bootstrap_timeout_where_there_is_no_waiting_one() -> None:
    src = _entry_source("EnvInt").replace(
        "    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)\n", ""
    )
    out = _entry(src)
    lines = out.splitlines()
    at = lines.index("    SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT = EnvInt(300)")
    assert lines[at + 3] == f"    {ENV} = EnvInt(300)"


def test_entry_refuses_siblings_of_a_type_whose_get_may_not_reject_nan() -> None:
    with pytest.raises(AnchorError, match="the sibling timeouts are EnvFloat entries"):
        _entry(_entry_source("EnvFloat"))


def test_entry_needs_a_sibling() -> None:
    src = _entry_source("EnvInt").replace("SGLANG_DISAGGREGATION_", "SGLANG_OTHER_")
    with pytest.raises(AnchorError, match="no registry entry"):
        _entry(src)


# -- the fix on a real release: both files ----------------------------------------------------


@pytest.mark.releases
@pytest.mark.parametrize(
    ("version", "convention_files"),
    [("0.4.7", {PREFILL}), ("0.5.9", {PREFILL, ENVIRON}), ("0.5.10", {PREFILL, ENVIRON})],
)
def test_apply_writes_the_releases_convention(
    version: str, convention_files: set[str], tmp_path: Path
) -> None:
    root = copy_release(version, tmp_path / version)
    result = pipeline.plan(open_tree(root))
    assert {rel for rel in result.changes if rel in (PREFILL, ENVIRON)} == convention_files
    pipeline.write(result)
    prefill = (root / PREFILL).read_text()
    if ENVIRON in convention_files:  # 0.5.8+: the siblings are registry entries
        assert f"    {ENV} = EnvInt(300)\n" in (root / ENVIRON).read_text()
        assert f"timeout = envs.{ENV}.get()" in prefill
        assert "get_int_env_var" not in prefill
    else:  # as the release reads its sibling timeouts
        assert f'timeout = get_int_env_var("{ENV}", 300)' in prefill
        assert "_get_inflight_timeout" not in prefill
    # idempotent: a second run changes nothing and finds the fix present
    again = pipeline.plan(open_tree(root))
    assert again.changes == {}
    assert again.outcomes["inflight-deadline"].status.value == "present"


@pytest.mark.releases
def test_a_marker_in_one_of_the_two_files_only_is_refused(tmp_path: Path) -> None:
    original = copy_release("0.5.10", tmp_path / "original")
    root = patched_copy("0.5.10", tmp_path / "patched")

    # the registry entry without the prefill.py part
    broken = tmp_path / "entry-only"
    shutil.copytree(original, broken)
    shutil.copy(root / ENVIRON, broken / ENVIRON)
    outcome = _inflight(broken)
    assert outcome.status.value == "refused"
    assert f"marker is in {ENVIRON}" in (outcome.note or "")
    assert "_fail_timed_out_inflight_reqs()" in (outcome.note or "")

    # the prefill.py part without the registry entry
    broken = tmp_path / "prefill-only"
    shutil.copytree(root, broken, dirs_exist_ok=False)
    shutil.copy(original / ENVIRON, broken / ENVIRON)
    outcome = _inflight(broken)
    assert outcome.status.value == "refused"
    assert f"missing the {ENV} entry in {ENVIRON}" in (outcome.note or "")

    # a helper that reads the timeout some other way
    broken = tmp_path / "other-read"
    shutil.copytree(root, broken)
    path = broken / PREFILL
    path.write_text(path.read_text().replace(f"envs.{ENV}.get()", "300"))
    outcome = _inflight(broken)
    assert outcome.status.value == "refused"
    assert f"the read of envs.{ENV}" in (outcome.note or "")


@pytest.mark.releases
def test_an_entry_already_in_the_registry_is_used_as_it_is(tmp_path: Path) -> None:
    root = copy_release("0.5.10", tmp_path / "own-entry")
    path = root / ENVIRON
    sibling = "    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)\n"
    text = path.read_text()
    assert sibling in text
    path.write_text(text.replace(sibling, f"{sibling}    {ENV} = EnvInt(600)\n"))
    before = path.read_text()
    result = pipeline.plan(open_tree(root))
    assert set(result.changes) >= {PREFILL} and ENVIRON not in result.changes
    pipeline.write(result)
    assert path.read_text() == before
    assert f"envs.{ENV}.get()" in (root / PREFILL).read_text()
    assert pipeline.plan(open_tree(root)).outcomes["inflight-deadline"].status.value == "present"


def _inflight(root: Path) -> Outcome:
    return pipeline.plan(open_tree(root)).outcomes["inflight-deadline"]


# -- a value that is not a whole number, run through the release's own code ---------------------


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.4.7", "0.5.10"])
@pytest.mark.parametrize("value", ["nan", "inf", "abc"])
def test_a_bad_value_warns_at_first_use_and_the_default_applies(
    version: str, value: str, tmp_path: Path
) -> None:
    """0.4.7: the release's get_int_env_var, which gives the default (silently, as for the
    sibling timeouts); 0.5.10: the release's own EnvInt (from its environ.py) behind the
    registry entry pdguard adds, which warns."""
    root = patched_copy(version, tmp_path / version)
    target = load_target(open_tree(root))
    late = RequestSpec(scenarios.WEDGED.rid, prefill_s=5.0, transfer_s=None)
    config = world.WorldConfig((late,), 2, horizon=scenarios.WEDGE_HORIZON, env={ENV: value})
    trace = world.simulate(config, target)
    outcome = scenarios._deadline(300.0)(trace)
    assert outcome.verdict == "pass", outcome.observed
    timed_out = [
        e
        for e in trace.events
        if e.kind == "log" and "timed out after" in e.detail and "inflight queue" in e.detail
    ]
    # every rank says why (0.5.10: the release's Failed branch logs the recorded reason)
    assert {e.rank for e in timed_out} == {0, 1}
    assert all(f"({ENV}=300)" in e.detail for e in timed_out)
    if version == "0.4.7":
        return
    # the release's EnvInt.get() says "nan"
    warnings = [
        e
        for e in trace.events
        if e.kind == "log"
        and e.detail.startswith("warning")
        and ENV in e.detail
        and (repr(value) in e.detail or f'"{value}"' in e.detail)
    ]
    assert warnings, [e.detail for e in trace.events if e.kind == "log"]
    # at first use: when the deadline is first checked, after the request's 5 s prefill
    entry = trace.entered_inflight(late.rid)
    assert entry is not None
    assert min(e.time for e in warnings) >= entry.time
    assert ENV in warnings[0].detail and "300" in warnings[0].detail


# -- check: a deadline is recognised by what it does, however its timeout is read --------------

HAND_WRITTEN = """\
import time

from sglang.srt.environ import envs
from sglang.srt.utils import get_int_env_var

from .utils import poll_and_all_reduce


def _limit():
    return 300


class Mixin:
    def add(self, req):
        req.queued_at = time.monotonic()
        self.disagg_prefill_inflight_queue.append(req)

    def process_disagg_prefill_inflight_queue(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if {test}:
                req.disagg_kv_sender.abort()
        polls = poll_and_all_reduce(
            [req.disagg_kv_sender for req in self.disagg_prefill_inflight_queue],
            self.group,
        )
        return polls
"""


@pytest.mark.parametrize(
    "test",
    [
        "envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get() < now - req.queued_at",
        "now - req.queued_at > envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()",
        "get_int_env_var('SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT', 300) < now - req.queued_at",
        "_limit() < now - req.queued_at",
        "now - req.queued_at > envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.value",
    ],
)
def test_a_deadline_is_recognised_however_the_timeout_is_read(test: str) -> None:
    """The timeout side is configuration (``envs.X``, a call): never taken for the stamp."""
    model = analyse(ast.parse(HAND_WRITTEN.format(test=test)))
    assert model is not None
    checks = model.valid_checks()
    assert [c.attr for c in checks] == ["queued_at"]
    assert model.unstamped() == []
