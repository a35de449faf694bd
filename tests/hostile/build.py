"""A corpus of hostile SGLang trees and git repositories, built at test time from a copy of a real
release (``vendor_sglang``: nothing of SGLang is committed here). Each case is a mutation of a
fresh copy and the command to run on it; ``tests/cli/test_hostile.py`` runs every case as a user
would (a subprocess with a timeout and a planted secret in its environment) and checks that it
ends as a ruff or git user expects: exit 2 with one line naming the file, nothing changed, no
secret printed, no hang.

``python -m tests.hostile.build DEST`` builds every directory case under ``DEST`` to look at.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdguard.sglang_names import DISAGGREGATION_DIR, PREFILL_PATH

VERSION = "0.5.14"  # a release apply patches (family F8), in the CI set
SECRET_ENV = "PDGUARD_HOSTILE_SECRET"
SECRET = "hunter2-5f1a9c"  # planted in the environment of every run; must never be printed
ENVIRON = "sglang/srt/environ.py"


@dataclass(frozen=True)
class Case:
    """A hostile tree: ``mutate(tree, outside)`` turns a copy of the release (``tree``, the
    directory holding ``sglang``) hostile, ``outside`` is a directory beside it; ``args`` the
    command (``{tree}`` stands for the tree); the run must exit ``code`` and, for exit 2, its one
    stderr line must hold ``names`` (the file, relative to the tree)."""

    mutate: Callable[[Path, Path], None]
    args: tuple[str, ...]
    names: str
    code: int = 2


def _fifo(rel: str) -> Callable[[Path, Path], None]:
    def mutate(tree: Path, outside: Path) -> None:
        path = tree / rel
        path.unlink(missing_ok=True)
        os.mkfifo(path)

    return mutate


def _socket(rel: str) -> Callable[[Path, Path], None]:
    def mutate(tree: Path, outside: Path) -> None:
        import socket

        path = tree / rel
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))  # the file stays after the socket is closed
        server.close()

    return mutate


def _config_link(name: str, target: str) -> Callable[[Path, Path], None]:
    def mutate(tree: Path, outside: Path) -> None:
        (tree / name).symlink_to(target)

    return mutate


def _config_text(name: str, text: str) -> Callable[[Path, Path], None]:
    def mutate(tree: Path, outside: Path) -> None:
        (tree / name).write_text(text.replace("$SECRET", SECRET))

    return mutate


def _outside_dir(tree: Path, outside: Path) -> None:
    (outside / "evil").mkdir()
    (outside / "evil" / "conn.py").write_text("X = 1\n")
    (tree / DISAGGREGATION_DIR / "evil").symlink_to(outside / "evil")


def _loop_dir(tree: Path, outside: Path) -> None:
    (tree / DISAGGREGATION_DIR / "loop").symlink_to("..")


def _deep(terms: int) -> Callable[[Path, Path], None]:
    def mutate(tree: Path, outside: Path) -> None:
        with (tree / PREFILL_PATH).open("a") as handle:
            handle.write("\n\nDEEP = " + " + ".join(["1"] * terms) + "\n")

    return mutate


def _oversize(tree: Path, outside: Path) -> None:
    with (tree / PREFILL_PATH).open("a") as handle:
        handle.write("\n" + "# padding\n" * 500_000)  # 5 MB: over pdguard's 2 MB bound


def forge_journal(tree: Path, outside: Path) -> None:
    """A journal committed to the tree: it asks to "roll back" prefill.py to a hidden file."""
    import json

    directory = (tree / DISAGGREGATION_DIR).absolute()
    target = directory / "prefill.py"
    hidden = directory / ".prefill.py.x.orig.pdguard"
    hidden.write_text(f"import os\nos.system('echo {SECRET}')\n")
    (directory / ".prefill.py.x.new.pdguard").write_text("")  # reads as "roll back"
    record = {
        "pdguard_journal": 1,
        "pid": 1,
        "files": [
            {
                "target": str(target),
                "temp": str(directory / ".prefill.py.x.new.pdguard"),
                "backup": str(hidden),
            }
        ],
    }
    journal = directory / ".pdguard-journal-x.json"
    journal.write_text(json.dumps(record))
    journal.chmod(0o600)


DIRECTORY_CASES: dict[str, Case] = {
    # 1. only regular files are read: nothing blocks
    "fifo-py-check": Case(_fifo(f"{DISAGGREGATION_DIR}/evil.py"), ("check", "{tree}"), "evil.py"),
    "fifo-py-apply": Case(_fifo(f"{DISAGGREGATION_DIR}/evil.py"), ("apply", "{tree}"), "evil.py"),
    "fifo-decode": Case(
        _fifo(f"{DISAGGREGATION_DIR}/decode.py"), ("apply", "--check", "{tree}"), "decode.py"
    ),
    "fifo-environ": Case(_fifo(ENVIRON), ("apply", "{tree}"), "environ.py"),
    "socket-py": Case(_socket(f"{DISAGGREGATION_DIR}/sock.py"), ("check", "{tree}"), "sock.py"),
    "fifo-setup-cfg": Case(_fifo("setup.cfg"), ("apply", "{tree}"), "setup.cfg"),
    # 2. no config symlink followed out of the tree; no content quoted
    **{
        f"config-symlink-{name.strip('.')}": Case(
            _config_link(name, "/proc/self/environ"), ("apply", "--check", "{tree}"), name
        )
        for name in (".isort.cfg", "setup.cfg", "tox.ini", "pyproject.toml", ".editorconfig")
    },
    "config-content-not-quoted": Case(
        _config_text("setup.cfg", "TOKEN=$SECRET\n"), ("apply", "--check", "{tree}"), "setup.cfg"
    ),
    "config-value-not-quoted": Case(
        _config_text("setup.cfg", "[isort]\nline_length = $SECRET\n"),
        ("apply", "--check", "{tree}"),
        "setup.cfg",
    ),
    "config-profile-not-quoted": Case(
        _config_text(".isort.cfg", "[settings]\nprofile = $SECRET\n"),
        ("apply", "--check", "{tree}"),
        ".isort.cfg",
    ),
    # symlinked directories: out of the tree, or a loop, refused (never skipped)
    "dir-symlink-outside": Case(_outside_dir, ("check", "{tree}"), "evil"),
    "dir-symlink-loop": Case(_loop_dir, ("check", "{tree}"), "loop"),
    # 3. a journal committed to the tree is never obeyed; a dry run never repairs
    "forged-journal-dry-run": Case(
        forge_journal, ("apply", "--check", "{tree}"), ".pdguard-journal-x.json"
    ),
    # 7. deep but valid code is patched; code Python cannot compile is refused with one line
    "deep-900": Case(_deep(900), ("apply", "--check", "{tree}"), "", code=1),
    "deep-3000": Case(_deep(3000), ("apply", "--check", "{tree}"), "prefill.py"),
    # 8. every isort setting isort accepts
    "editorconfig-off": Case(
        _config_text(".editorconfig", "root = true\n[*.py]\nmax_line_length = off\n"),
        ("apply", "--check", "{tree}"),
        "",
        code=1,
    ),
    # 10. bounds
    "oversize-prefill": Case(_oversize, ("check", "{tree}"), "prefill.py"),
}


def build(dest: Path, release: Path) -> dict[str, Path]:
    """Every directory case as a copy of ``release`` under ``dest``; the trees by case name."""
    trees = {}
    for name, case in DIRECTORY_CASES.items():
        tree = dest / name / "tree"
        outside = dest / name / "outside"
        outside.mkdir(parents=True)
        shutil.copytree(release, tree, symlinks=True)
        case.mutate(tree, outside)
        trees[name] = tree
    return trees


if __name__ == "__main__":
    from pdguard.vendor_sglang import fetch_release

    for name, tree in build(Path(sys.argv[1]), fetch_release(VERSION)).items():
        print(f"{name}: {tree}")
