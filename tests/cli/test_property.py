"""Properties of ``pdguard apply`` on generated (and randomly damaged) hand-written trees.

- apply never corrupts a file it refuses: exit 2 leaves every byte as it was; exit 0 leaves
  every file it wrote compiling, with its BOM and line-ending style, and a second apply
  changes nothing;
- ``--check`` and ``--diff`` never change any byte (or mtime).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pdguard.cli import main
from pdguard.source_file import SourceFile
from tests.helpers import snapshot
from tests.snippets import PREFILL_REL, make_tree

BOM = b"\xef\xbb\xbf"

# Lines that mean something to pdguard, so that damage is not only syntax errors.
FRAGMENTS = [
    "\n",
    "import os\n",
    "import time\n",
    "import os, time\n",
    "from time import monotonic\n",
    "from os import environ\n",
    "KVPoll = None\n",
    "# pdguard: inflight-deadline\n",
    "# pdguard: sender-bootstrap-timeout\n",
    "        pass\n",
    "            pass\n",
    "                raise Exception('x')\n",
    "        self.disagg_prefill_inflight_queue.append(req)\n",
    "    def _fail_timed_out_inflight_reqs(self):\n        pass\n",
    "x = 1  # trailing comment\n",
    '"""a string"""\n',
    "\t\n",
    "\r\n",
    "\r",
    "\x0c\n",
]


@dataclass(frozen=True)
class Damage:
    line: int
    payload: str | bytes


@dataclass(frozen=True)
class TreeSpec:
    newline: str
    bom: bool
    encoding_cookie: str | None
    failed_branch_raises: bool
    damage: Damage | None


damages = st.builds(
    Damage,
    line=st.integers(min_value=0, max_value=90),
    payload=st.one_of(
        st.sampled_from(FRAGMENTS),
        st.text(max_size=30),
        st.binary(max_size=12),
    ),
)


@st.composite
def tree_specs(draw: st.DrawFn) -> TreeSpec:
    bom = draw(st.booleans())
    return TreeSpec(
        newline=draw(st.sampled_from(["\n", "\r\n"])),
        bom=bom,
        encoding_cookie=None if bom else draw(st.sampled_from([None, "latin-1"])),
        failed_branch_raises=draw(st.booleans()),
        damage=draw(st.one_of(st.none(), damages)),
    )


def build(root: Path, spec: TreeSpec) -> Path:
    make_tree(
        root,
        failed_branch_raises=spec.failed_branch_raises,
        newline=spec.newline,
        bom=spec.bom,
        encoding_cookie=spec.encoding_cookie,
    )
    if spec.damage is not None:
        path = root / PREFILL_REL
        lines = path.read_bytes().splitlines(keepends=True)
        payload = spec.damage.payload
        if isinstance(payload, str):
            payload = payload.replace("\n", spec.newline).encode(
                spec.encoding_cookie or "utf-8", errors="replace"
            )
        lines.insert(min(spec.damage.line, len(lines)), payload)
        path.write_bytes(b"".join(lines))
    return root


def run(*args: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _style(data: bytes) -> tuple[bool, str, str]:
    """BOM, dominant line ending, and the encoding the BOM or the coding cookie declares."""
    source = SourceFile.decode("x.py", data)
    return data.startswith(BOM), source.newline, source.encoding


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> pytest.TempPathFactory:
    return tmp_path_factory


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=tree_specs())
def test_apply_never_corrupts_a_file_it_refuses(
    tmp_root: pytest.TempPathFactory, spec: TreeSpec
) -> None:
    root = build(tmp_root.mktemp("tree"), spec)
    before = snapshot(root)
    code, out, err = run("apply", root)
    after = snapshot(root)
    event(f"exit {code}, {'damaged' if spec.damage else 'intact'}")
    assert code in (0, 2), (code, out, err)
    if spec.damage is None:
        assert code == (2 if spec.failed_branch_raises else 0), err

    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pdguard: error: "), err
        assert {rel: v[0] for rel, v in after.items()} == {rel: v[0] for rel, v in before.items()}
        return

    assert err == ""
    assert after.keys() == before.keys()  # no new file, no temp file left behind
    written = [rel for rel in after if after[rel][0] != before[rel][0]]
    for rel in written:
        assert rel.endswith(".py")
        new = after[rel][0]
        compile(new, rel, "exec", dont_inherit=True)
        assert _style(new) == _style(before[rel][0])
        assert after[rel][2] == before[rel][2]  # mode
        cookie = f"# -*- coding: {spec.encoding_cookie} -*-".encode()
        if spec.encoding_cookie and before[rel][0].startswith(cookie):
            assert new.startswith(cookie)

    code, out, err = run("apply", root)
    assert (code, err) == (0, ""), out
    assert snapshot(root) == after


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=tree_specs(),
    mode=st.sampled_from(["--check", "--diff"]),
    fmt=st.sampled_from(["text", "json"]),
    applied_first=st.booleans(),
)
def test_check_and_diff_never_change_a_byte(
    tmp_root: pytest.TempPathFactory, spec: TreeSpec, mode: str, fmt: str, applied_first: bool
) -> None:
    root = build(tmp_root.mktemp("tree"), spec)
    if applied_first:
        run("apply", root)
    before = snapshot(root)
    code, _, err = run("apply", mode, "--format", fmt, root)
    event(f"{mode} exit {code}")
    assert code in (0, 1, 2), err  # --diff exits 1 on a diff, as --check on a change
    if code == 2:
        assert err.splitlines()[-1].startswith("pdguard: error: "), err
        assert all(not line.startswith("pdguard: error: ") for line in err.splitlines()[:-1])
    assert snapshot(root) == before
