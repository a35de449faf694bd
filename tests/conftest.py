"""Fixtures shared by the test modules (plain helpers and constants are in tests/helpers.py,
hand-written SGLang-shaped snippets in tests/snippets.py).

Every test runs without pdguard's result cache (``pdguard.cache``), as before it existed: a
test that breaks pdguard on purpose must not be served an earlier run's result.
``tests/pdguard/test_cache.py`` turns it back on, with a cache directory of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import PATCHABLE, RELEASES, copy_release, patched_copy
from tests.snippets import make_tree


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hand-written tree of tests/snippets.py at ``tmp_path/tree``, run from ``tmp_path``
    (so that reported paths start with ``tree/``)."""
    monkeypatch.chdir(tmp_path)
    return make_tree(tmp_path / "tree")


@pytest.fixture(params=RELEASES, ids=lambda r: r.version)
def release_copy(request: pytest.FixtureRequest, tmp_path: Path):
    """(release, a writable copy of its tree) for every release of ``helpers.RELEASES``."""
    info = request.param
    return info, copy_release(info.version, tmp_path / f"sglang-{info.version}")


@pytest.fixture(params=PATCHABLE, ids=lambda r: r.version)
def patched_release(request: pytest.FixtureRequest, tmp_path: Path):
    """(release, a copy of its tree patched by ``pdguard apply``) for every release that apply
    patches (``helpers.PATCHABLE``)."""
    info = request.param
    return info, patched_copy(info.version, tmp_path / f"sglang-{info.version}")


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDGUARD_NO_CACHE", "1")
    # not in a GitHub workflow, even when the tests run in one (paths in annotations and SARIF
    # are then named from its workspace): a test that wants one sets it
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """pdguard's per-user state (journal records, the cache key: ``pdguard.state``) in a
    directory of the test's own, never the user's (set outside ``monkeypatch``: a test that
    calls ``monkeypatch.undo()`` keeps it)."""
    before = os.environ.get("PDGUARD_STATE")
    os.environ["PDGUARD_STATE"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        del os.environ["PDGUARD_STATE"]
    else:
        os.environ["PDGUARD_STATE"] = before


@pytest.fixture(autouse=True)
def _no_leftover_readers() -> Iterator[None]:
    """Each test starts the ``git cat-file`` readers it needs (``pdguard.git_objects``) and
    they are stopped after it: none is handed to the next test."""
    from pdguard.git_objects import close_readers

    close_readers()
    yield
    close_readers()
