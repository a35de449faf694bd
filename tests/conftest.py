"""Every test runs without pdguard's result cache (``pdguard.cache``), as before it existed: a
test that breaks pdguard on purpose must not be served an earlier run's result.
``tests/test_cache.py`` turns it back on, with a cache directory of its own."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDGUARD_NO_CACHE", "1")
