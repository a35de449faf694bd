"""``pdguard apply`` on real SGLang releases, fetched from PyPI through vendor_sglang.

Every release pinned with ``ci = true`` (at least one per shape family) runs on every CI run;
``PDGUARD_ALL_RELEASES=1`` runs all 62 pinned releases 0.4.6 - 0.5.23.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pdguard.cli import main
from pdguard.vendor_sglang import fetch_release, load_manifest
from tests.quality import black_complaints, isort_complaints, ruff_findings
from tests.test_decode_fixes import decode_expected

pytestmark = pytest.mark.releases

RELEASES = [r for r in load_manifest() if r.ci or os.environ.get("PDGUARD_ALL_RELEASES") == "1"]

# Expected report per shape family (see README "Release families").
EXPECTED = {
    "F1": {"inflight-deadline": "refused", "sender-bootstrap-timeout": "applied"},
    **{
        fam: {"inflight-deadline": "applied", "sender-bootstrap-timeout": "applied"}
        for fam in ("F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9")
    },
    **{
        fam: {"inflight-deadline": "applied", "sender-bootstrap-timeout": "upstream"}
        for fam in ("F10", "F11", "F12")
    },
}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _apply_json(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["apply", str(root), "--format", "json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{") :])


@pytest.fixture(params=RELEASES, ids=lambda r: r.version)
def release(request: pytest.FixtureRequest, tmp_path: Path):
    copy = tmp_path / f"sglang-{request.param.version}"
    shutil.copytree(fetch_release(request.param.version), copy)
    return request.param, copy


def test_apply_release(release, capsys: pytest.CaptureFixture[str]) -> None:
    info, root = release
    before = _snapshot(root)
    code, report = _apply_json(root, capsys)

    assert report["sglang_version"] == info.version
    # The decode fixes (issue 11) follow the decode families, not the prefill ones.
    expected = {**EXPECTED[info.family], **decode_expected(info.version)}
    assert report["fixes"] == expected, report["notes"]
    if info.family == "F1":
        # 0.4.6 - 0.4.6.post4: the Failed branch raises; refuse, write nothing.
        assert code == 2
        assert "raises" in report["notes"]["inflight-deadline"]
        assert report["files_changed"] == []
        assert _snapshot(root) == before
        return
    assert code == 0
    changed = report["files_changed"]
    assert "sglang/srt/disaggregation/prefill.py" in changed
    # NIXL's sender needs the bootstrap timeout from 0.4.7 (F3) until 0.5.18 (F10) fixed it;
    # its receiver (issue 11) needs the waiting timeout up to 0.5.5.post3.
    nixl_fixed = info.family in ("F3", "F4", "F5", "F6", "F7", "F8", "F9")
    nixl_fixed |= expected["receiver-waiting-timeout"] == "applied"
    assert ("sglang/srt/disaggregation/nixl/conn.py" in changed) == nixl_fixed
    after = _snapshot(root)
    assert {rel for rel in after if after[rel] != before[rel]} == set(changed)

    for rel in changed:
        old, new = before[rel].decode(), after[rel].decode()
        compile(new, rel, "exec")
        assert black_complaints(old, new) == [], rel
        assert isort_complaints(old, new) == [], rel
        original = root.parent / "original.py"
        original.write_bytes(before[rel])
        assert ruff_findings(root / rel) == ruff_findings(original), rel

    # Idempotent: a second run changes no byte and reports pdguard's fixes as present.
    code, again = _apply_json(root, capsys)
    assert code == 0
    assert again["files_changed"] == []
    assert _snapshot(root) == after
    assert again["fixes"] == {
        name: "present" if status == "applied" else status
        for name, status in report["fixes"].items()
    }


def test_check_and_diff_write_nothing(release, capsys: pytest.CaptureFixture[str]) -> None:
    info, root = release
    before = _snapshot(root)
    expected = 2 if info.family == "F1" else 1
    assert main(["apply", str(root), "--check"]) == expected
    assert main(["apply", str(root), "--diff"]) == (2 if info.family == "F1" else 0)
    out = capsys.readouterr().out
    if info.family != "F1":
        assert "+++ b/sglang/srt/disaggregation/prefill.py" in out
    assert _snapshot(root) == before
