"""The decode side on shapes no release has (``tests/corpus_decode.py``): the rules' verdicts,
and what ``decode-queue-bound`` does with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard.fixes.base import Status
from pdguard.fixes.decode_queue_bound import DecodeQueueBoundFix
from pdguard.sglang_names import DECODE_PATH, ENVIRON_MODULE, ENVIRON_OBJECT
from pdguard.tree import open_tree
from pdguard.workspace import Workspace
from tests.corpus_decode import CASES, THROTTLE_IN_TRY, Case, fork, score, verdicts
from tests.paths import ROOT
from tests.snippets import make_tree


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_decode_corpus_verdict(case: Case) -> None:
    got = verdicts(case)
    if case.correct:
        assert not got, f"false positive ({case.why}): {sorted(got)}"
    else:
        assert case.expect <= got, f"false negative ({case.why}): {sorted(got)}"


def test_decode_corpus_has_no_false_verdicts() -> None:
    assert score() == ([], [])


def _plan(tmp_path: Path, decode_text: str) -> tuple[Status, str, Workspace]:
    make_tree(tmp_path)
    # the release's registry reader of the waiting timeout
    reader = f"from {ENVIRON_MODULE} import {ENVIRON_OBJECT}\n\nlogger = object()\n"
    (tmp_path / DECODE_PATH).write_text(decode_text.replace("\n\n", "\n" + reader + "\n", 1))
    workspace = Workspace(open_tree(tmp_path))
    outcome = DecodeQueueBoundFix().plan(workspace)
    return outcome.status, outcome.note, workspace


def test_bound_refuses_entries_without_a_receiver(tmp_path: Path) -> None:
    """Bare requests have no kv_receiver: the bound would raise when it fires."""
    status, note, workspace = _plan(tmp_path, fork())
    assert status is Status.REFUSED
    assert "self.awaiting_rank" in note and "no kv_receiver" in note
    assert not workspace.changed()


def test_bound_names_the_entries_class_when_it_is_known(tmp_path: Path) -> None:
    text = fork().replace(
        "    def add(self, req, is_retracted=False):",
        "    def add(self, req: Req, is_retracted=False):",
    )
    assert "req: Req" in text
    status, note, _ = _plan(tmp_path, text)
    assert status is Status.REFUSED
    assert "are Req, with no kv_receiver" in note


def _release_shaped(process: str) -> str:
    from pdguard.checks.rules.pdg007_decode_queue_waits_forever import UNBOUNDED, decode

    text = decode(requeue=UNBOUNDED)[DECODE_PATH]
    polls = text[text.index("        req_conns =") :]
    return text.replace(polls, process)


def test_bound_applies_under_a_throttle_in_try_finally(tmp_path: Path) -> None:
    status, note, workspace = _plan(tmp_path, _release_shaped(THROTTLE_IN_TRY))
    assert status is Status.APPLIED, note
    patched = workspace.changed()[DECODE_PATH].text
    assert "decode_req.kv_receiver.abort()" in patched


def _entries_fields(extra: str) -> str:
    """The release-shaped queue, its entries a ``DecodeEntry`` defined as ``extra`` says."""
    from pdguard.checks.rules.pdg007_decode_queue_waits_forever import UNBOUNDED, decode

    text = decode(requeue=UNBOUNDED)[DECODE_PATH]
    text = text.replace(
        "    def add(self, decode_req):",
        "    def add(self, decode_req: DecodeEntry):",
    )
    return text.replace("class DecodePreallocQueue:", extra + "\n\nclass DecodePreallocQueue:")


@pytest.mark.parametrize(
    ("fields", "log"),
    [
        ("    req: Req\n    kv_receiver: object\n", "decode_req.req.rid"),
        ("    rid: str\n    kv_receiver: object\n", "decode_req.rid"),
        ("    kv_receiver: object\n", None),
    ],
)
def test_bound_logs_only_the_request_id_its_entries_have(
    tmp_path: Path, fields: str, log: str | None
) -> None:
    req = "class Req:\n    def __init__(self, rid):\n        self.rid = rid\n\n\n"
    text = _entries_fields(req + "class DecodeEntry:\n" + fields)
    status, note, workspace = _plan(tmp_path, text)
    assert status is Status.APPLIED, note
    patched = workspace.changed()[DECODE_PATH].text
    generated = patched[patched.index("# pdguard: decode-queue-bound") :]
    generated = generated[: generated.index("self.pending_reqs = remaining")]
    if log is None:
        assert "rid" not in generated, generated
        assert "prefill DP rank not resolved in" in generated
    else:
        assert "{" + log + "}" in generated, generated


# -- the env registry: an entry the tree does not define (PDG005) ------------------------------

_REGISTRY = """\
class EnvInt:
    def __init__(self, default):
        self.default = default


class Envs:
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)
{entry}

envs = Envs()
"""
_READER = """\
from sglang.srt.environ import envs


def read_limits():
    return envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get(), envs.{name}.get()
"""


@pytest.mark.parametrize(
    ("entry", "module_level", "found"),
    [
        ("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT = EnvInt(300)", "", False),
        ("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT: EnvInt = EnvInt(300)", "", False),
        ("", "", True),  # removed
        ("SGLANG_DISAGGREGATION_INFLGHT_TIMEOUT = EnvInt(300)", "", True),  # misspelt
        ("", "SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT = EnvInt(300)\n", True),  # not on Envs
    ],
)
def test_pdg005_reports_a_registry_read_the_tree_does_not_define(
    entry: str, module_level: str, found: bool
) -> None:
    from pdguard.checks import Project, run
    from pdguard.sglang_names import ENVIRON_PATH, INFLIGHT_TIMEOUT_ENV

    texts = {
        DECODE_PATH: _READER.format(name=INFLIGHT_TIMEOUT_ENV),
        ENVIRON_PATH: _REGISTRY.format(entry="    " + entry if entry else "") + module_level,
    }
    findings = [(f.code, f.line) for f in run(Project(texts), ["PDG005"])]
    assert findings == ([("PDG005", 5)] if found else []), findings


def test_pdg005_registry_entry_inherited_or_unknown_shape() -> None:
    from pdguard.checks import Project, run
    from pdguard.sglang_names import ENVIRON_PATH

    inherited = (
        "class Base:\n    SGLANG_X = 1\n\n\nclass Envs(Base):\n    pass\n\n\nenvs = Envs()\n"
    )
    dynamic = "class Envs:\n    def __getattr__(self, name):\n        return 1\n\n\nenvs = Envs()\n"
    for registry in (inherited, dynamic):
        texts = {DECODE_PATH: _READER.format(name="SGLANG_X"), ENVIRON_PATH: registry}
        texts[DECODE_PATH] = texts[DECODE_PATH].replace(
            "envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get(), ", ""
        )
        assert not list(run(Project(texts), ["PDG005"]))


@pytest.mark.releases
@pytest.mark.parametrize("edit", ["remove", "misspell"])
def test_check_and_apply_agree_on_a_broken_registry_entry(
    tmp_path: Path, edit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A patched release whose inflight timeout entry was removed or misspelt: the read
    raises at run time; check reports it as apply --check refuses it."""
    from pdguard.sglang_names import ENVIRON_PATH, INFLIGHT_TIMEOUT_ENV
    from tests.helpers import patched_copy, run_main

    root = patched_copy("0.5.21", tmp_path / "tree")
    environ = root / ENVIRON_PATH
    text = environ.read_text()
    entry = next(line for line in text.splitlines() if INFLIGHT_TIMEOUT_ENV in line)
    new = "" if edit == "remove" else entry.replace("INFLIGHT", "INFLGHT")
    environ.write_text(text.replace(entry + "\n", new + "\n" if new else ""))
    code, out, _ = run_main(capsys, "check", root)
    assert code == 1 and "PDG005" in out and f"envs.{INFLIGHT_TIMEOUT_ENV}" in out, out
    code, _, err = run_main(capsys, "apply", "--check", root)
    assert code != 0 and INFLIGHT_TIMEOUT_ENV in err


# -- the pre-commit hooks run on every file a fix or rule reads -------------------------------


def test_precommit_hooks_cover_every_file_the_fixes_read() -> None:
    import re

    from pdguard.fixes import FIXES
    from pdguard.sglang_names import READ_DIRS, READ_FILES

    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text()
    patterns = re.findall(r"^  files: (.+)$", hooks, re.M)
    assert len(patterns) == hooks.count("\n- id: ") + hooks.startswith("- id: ") > 0
    reads = {path for fix in FIXES for path in fix.reads}
    assert reads <= {*READ_DIRS, *READ_FILES}  # verify's cache key holds them too
    for path in sorted(reads | {*READ_DIRS, *READ_FILES}):
        sample = path if path.endswith(".py") else f"{path}/any_module.py"
        for prefix in ("", "python/"):  # a wheel's layout, upstream's checkout
            for pattern in patterns:
                assert re.search(pattern, prefix + sample), (pattern, prefix + sample)
    assert not any(re.search(p, "python/sglang/srt/layers/linear.py") for p in patterns)
