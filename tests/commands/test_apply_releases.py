"""``pdguard apply`` on real SGLang releases, fetched from PyPI through vendor_sglang.

Every release pinned with ``ci = true`` (at least one per shape family) runs on every CI run;
``PDGUARD_ALL_RELEASES=1`` runs all 62 pinned releases 0.4.6 - 0.5.23 (``tests.helpers.RELEASES``,
copied by the ``release_copy`` fixture of tests/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdguard.cli import main
from tests.fixes.test_decode_fixes import decode_expected
from tests.helpers import APPLY_STATUSES, FIXES, file_bytes
from tests.quality import black_complaints, isort_complaints, ruff_findings

pytestmark = pytest.mark.releases

# Expected report per shape family (see docs/releases.md).
EXPECTED = {
    family: dict(zip(FIXES, statuses, strict=True)) for family, statuses in APPLY_STATUSES.items()
}


def _apply_json(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["apply", str(root), "--format", "json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{") :])


def test_apply_release(release_copy, capsys: pytest.CaptureFixture[str]) -> None:
    info, root = release_copy
    before = file_bytes(root)
    code, report = _apply_json(root, capsys)

    assert report["sglang_version"] == info.version
    # The decode fixes (issue 11) follow the decode families, not the prefill ones.
    expected = {**EXPECTED[info.family], **decode_expected(info.version)}
    if "refused" in expected.values():  # nothing written: a planned fix only would apply
        expected = {k: "would-apply" if v == "applied" else v for k, v in expected.items()}
    assert report["fixes"] == expected, report["notes"]
    if info.family == "F1":
        # 0.4.6 - 0.4.6.post4: the Failed branch raises; refuse, write nothing.
        assert code == 2
        assert "raises" in report["notes"]["inflight-deadline"]
        assert report["files_changed"] == []
        assert file_bytes(root) == before
        return
    assert code == 0
    # the report names files relative to the current directory
    changed = [
        Path(p).resolve().relative_to(root.resolve()).as_posix() for p in report["files_changed"]
    ]
    assert "sglang/srt/disaggregation/prefill.py" in changed
    # NIXL's sender needs the bootstrap timeout from 0.4.7 (F3) until 0.5.18 (F10) fixed it,
    # and a poll() that honours abort() up to 0.5.11 (F6); its receiver (issue 11) needs the
    # waiting timeout up to 0.5.5.post3.
    nixl_fixed = info.family in ("F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9")
    nixl_fixed |= expected["receiver-waiting-timeout"] == "applied"
    assert ("sglang/srt/disaggregation/nixl/conn.py" in changed) == nixl_fixed
    after = file_bytes(root)
    assert {rel for rel in after if after[rel] != before[rel]} == set(changed)

    for rel in changed:
        old, new = before[rel].decode(), after[rel].decode()
        compile(new, rel, "exec")
        # no method replaced on an instance (issue 10: `sender.poll = lambda: ...`)
        assert new.count(".poll = ") == old.count(".poll = "), rel
        assert black_complaints(old, new) == [], rel
        assert isort_complaints(old, new) == [], rel
        original = root.parent / "original.py"
        original.write_bytes(before[rel])
        assert ruff_findings(root / rel) == ruff_findings(original), rel

    # Idempotent: a second run changes no byte and reports pdguard's fixes as present.
    code, again = _apply_json(root, capsys)
    assert code == 0
    assert again["files_changed"] == []
    assert file_bytes(root) == after
    assert again["fixes"] == {
        name: "present" if status == "applied" else status
        for name, status in report["fixes"].items()
    }


def test_check_and_diff_write_nothing(
    release_copy, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    info, root = release_copy
    monkeypatch.chdir(root)
    before = file_bytes(root)
    expected = 2 if info.family == "F1" else 1
    assert main(["apply", ".", "--check"]) == expected
    assert main(["apply", ".", "--diff"]) == expected  # as ruff: exit 1 when there is a diff
    out = capsys.readouterr().out
    if info.family != "F1":
        assert "+++ b/sglang/srt/disaggregation/prefill.py" in out
    assert file_bytes(root) == before
