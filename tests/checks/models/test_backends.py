"""Only live code counts: a backend the tree's ``get_kv_class`` never returns (and nothing
else the tree runs names) blocks no fix; a live class that cannot be fixed can be left out of
a fix by name (``--ignore sender-abort:Class``), and check keeps reporting it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pdguard.checks.models.backends import dead_classes
from pdguard.sglang_names import DISAGGREGATION_DIR
from tests.helpers import copy_release, run_main, snapshot
from tests.snippets import make_tree

# A fork backend whose abort() concludes nothing (sender-abort refuses to rewrite it).
_FORK_CONN = """\
from sglang.srt.disaggregation.base.conn import BaseKVManager, BaseKVSender, KVPoll


class CudaIpcKVManager(BaseKVManager):
    def __init__(self, args, mode, server_args):
        self.status = {}

    def check_status(self, room):
        return self.status.get(room, KVPoll.Bootstrapping)


class CudaIpcKVSender(BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks=None, pp_rank=0):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.handles = []

    def init(self, num_kv_indices, aux_index=None):
        pass

    def send(self, kv_indices, state_indices=None):
        pass

    def poll(self):
        state = self.kv_mgr.check_status(self.bootstrap_room)
        return KVPoll.Success if self.handles else state

    def abort(self):
        self.handles = [None]

    def failure_exception(self):
        return RuntimeError("cuda ipc transfer failed")
"""
# Its registration, first in get_kv_class.
_REGISTER = """\
    if str(transfer_backend) == "cudaipc":
        from sglang.srt.disaggregation.cudaipc.conn import CudaIpcKVManager, CudaIpcKVSender

        return {
            KVClassType.MANAGER: CudaIpcKVManager,
            KVClassType.SENDER: CudaIpcKVSender,
        }.get(class_type)
"""
_OPTION = "--ignore sender-abort:CudaIpcKVSender"


def _fork(tmp_path: Path, registered: bool) -> Path:
    root = copy_release("0.5.21", tmp_path / "tree")
    backend = root / DISAGGREGATION_DIR / "cudaipc"
    backend.mkdir()
    (backend / "__init__.py").write_text("")
    (backend / "conn.py").write_text(_FORK_CONN)
    if registered:
        utils = root / DISAGGREGATION_DIR / "utils.py"
        text = utils.read_text()
        anchor = "    if transfer_backend == TransferBackend.MOONCAKE:\n"
        assert anchor in text
        utils.write_text(text.replace(anchor, _REGISTER + anchor, 1))
    return root


def test_a_class_only_dead_code_names_is_dead() -> None:
    tree = ast.parse(
        "def get_kv_class(kind):\n    return Live\n\n\n"
        "class Live(Base): pass\nclass Dead(Base): pass\nclass DeadChild(Dead): pass\n"
        "class LiveChild(Live): pass\nclass OnlyBase(Base): pass\nclass Used(OnlyBase): pass\n"
        "def make():\n    return Used()\n"
    )
    bases = {
        node.name: [getattr(b, "id", "") for b in node.bases]
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    candidates = ["Live", "Dead", "DeadChild", "LiveChild", "OnlyBase", "Used"]
    assert dead_classes([tree], candidates, bases) == {"Dead", "DeadChild", "LiveChild"}
    unregistered = ast.parse("class Dead(Base): pass\n")
    assert dead_classes([unregistered], ["Dead"], {"Dead": ["Base"]}) == frozenset()


def test_what_a_statement_names_is_kept_on_it_and_shared_by_trees() -> None:
    """The names each module statement reads are kept on the statement: asked again, or of
    another tree holding the same statements (``parse_module`` reuses a file's leading
    statements in its next version), the answer is the same."""
    first = ast.parse("def get_kv_class(kind):\n    return A\n\n\nclass A(B): pass\n")
    bases = {"A": ["B"], "C": ["B"]}
    assert dead_classes([first], ["A", "C"], bases) == {"C"}
    assert dead_classes([first], ["A", "C"], bases) == {"C"}
    second = ast.Module(
        body=[*first.body, *ast.parse("import C\nclass C(B): pass\nC()\n").body],
        type_ignores=[],
    )
    assert dead_classes([second], ["A", "C"], bases) == frozenset()  # C() at module level
    assert dead_classes([first], ["A", "C"], bases) == {"C"}


@pytest.mark.releases
def test_a_dead_backend_blocks_no_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _fork(tmp_path, registered=False)
    code, out, err = run_main(capsys, "apply", root)
    assert code == 0, err
    assert "dead code, left alone: CudaIpcKVSender" in out
    code, out, _ = run_main(capsys, "check", root)
    assert code == 0 and "CudaIpc" not in out, out


@pytest.mark.releases
def test_a_live_class_is_left_out_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _fork(tmp_path, registered=True)
    code, _, err = run_main(capsys, "apply", "--check", root)
    assert code == 2 and _OPTION in err, err  # the refusal names the option
    code, out, err = run_main(capsys, "apply", *_OPTION.split(), root)
    assert code == 0, err
    assert "inflight-deadline         applied" in out
    assert "left out by --ignore, still reported by check: CudaIpcKVSender" in out
    code, out, _ = run_main(capsys, "check", root)
    lines = [line for line in out.splitlines() if ": PDG" in line]
    assert code == 1 and lines and all("CudaIpcKVSender" in line for line in lines), out


def test_only_per_class_fixes_take_a_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_tree(tmp_path)
    code, _, err = run_main(capsys, "apply", "--check", "--ignore", "inflight-deadline:X", root)
    assert code == 2 and "those that can: sender-abort" in err, err


def test_a_class_the_tree_does_not_have_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt class would otherwise leave nothing out, silently."""
    root = make_tree(tmp_path)
    before = snapshot(root)
    code, _, err = run_main(capsys, "apply", "--ignore", "sender-abort:NoSuchKVSender", root)
    assert code == 2 and "no KV sender class 'NoSuchKVSender' in this tree" in err, err
    assert len(err.strip().splitlines()) == 1 and snapshot(root) == before


# A fork receiver that waits for the prefill with no waiting timeout (PDG006 when live).
_FORK_RECEIVER = """\
from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class CudaIpcKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None, prefill_dp_rank=None):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room

    def init(self, prefill_dp_rank=None):
        self.prefill_dp_rank = prefill_dp_rank

    def send_metadata(self, kv_indices, aux_index=None, state_indices=None):
        self.kv_mgr.post(self.bootstrap_room, kv_indices, aux_index)

    def poll(self):
        return self.kv_mgr.check_status(self.bootstrap_room)

    def failure_exception(self):
        return RuntimeError("cuda ipc transfer failed")
"""


def _receiver_fork(tmp_path: Path, registered: bool) -> Path:
    root = copy_release("0.5.21", tmp_path / "tree")
    backend = root / DISAGGREGATION_DIR / "cudaipc"
    backend.mkdir()
    (backend / "__init__.py").write_text("")
    (backend / "conn.py").write_text(_FORK_RECEIVER)
    if registered:
        utils = root / DISAGGREGATION_DIR / "utils.py"
        text = utils.read_text()
        anchor = "    if transfer_backend == TransferBackend.MOONCAKE:\n"
        assert anchor in text
        register = _REGISTER.replace("CudaIpcKVManager, CudaIpcKVSender", "CudaIpcKVReceiver")
        register = register.replace("KVClassType.MANAGER: CudaIpcKVManager,\n", "")
        register = register.replace(
            "KVClassType.SENDER: CudaIpcKVSender", "KVClassType.RECEIVER: CudaIpcKVReceiver"
        )
        utils.write_text(text.replace(anchor, register + anchor, 1))
    return root


@pytest.mark.releases
@pytest.mark.parametrize("registered", [False, True])
def test_a_dead_receiver_is_left_alone_and_a_live_one_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], registered: bool
) -> None:
    root = _receiver_fork(tmp_path, registered)
    code, out, _ = run_main(capsys, "check", "--select", "PDG006", root)
    if registered:
        assert code == 1 and "CudaIpcKVReceiver" in out, out
    else:
        assert code == 0 and "CudaIpc" not in out, out
        code, out, err = run_main(capsys, "apply", "--check", "--no-confirm", root)
        assert "dead code, left alone: CudaIpcKVReceiver" in out, out + err
