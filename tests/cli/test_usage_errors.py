"""A usage error is one line in the documented shape, ``pdguard: error: [COMMAND: ]what (see
`pdguard COMMAND --help`)``, exit 2, also for an option no parser knows (argparse's own names
the top parser)."""

from __future__ import annotations

import pytest

from tests.helpers import pdguard


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["check", "--show-fixs"],
            "pdguard: error: check: unrecognized arguments: --show-fixs "
            "(see `pdguard check --help`)",
        ),
        (
            ["apply", ".", "--bogus", "x"],
            "pdguard: error: apply: unrecognized arguments: --bogus x (see `pdguard apply --help`)",
        ),
        (
            ["check", "--format", "xml"],
            "pdguard: error: check: argument --format/--output-format: invalid choice: 'xml' "
            "(choose from 'text', 'json', 'sarif', 'github') (see `pdguard check --help`)",
        ),
    ],
)
def test_usage_errors_name_the_command(args: list[str], line: str) -> None:
    done = pdguard(*args)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [line]
    assert done.stdout == ""
