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
    text = fork().replace("    def add(self, req):", "    def add(self, req: Req):")
    status, note, _ = _plan(tmp_path, text)
    assert status is Status.REFUSED
    assert "are Req, with no kv_receiver" in note


def _release_shaped(process: str) -> str:
    from pdguard.checks.pdg007_decode_queue_waits_forever import UNBOUNDED, decode

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
    from pdguard.checks.pdg007_decode_queue_waits_forever import UNBOUNDED, decode

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
