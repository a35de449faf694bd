"""Where the tests find the repository and their data, wherever a test module sits."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SARIF_SCHEMA = DATA / "sarif-schema-2.1.0.json"
