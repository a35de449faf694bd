"""Before/after pairs for ``AddIsortedImports`` (hand-written snippets)."""

from __future__ import annotations

import ast

import isort
import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.codemods.isort_imports import AddIsortedImports, ImportRequest, reference_to

OS_TIME = [ImportRequest("os"), ImportRequest("time")]


class TestAddIsortedImports(CodemodTest):
    TRANSFORM = AddIsortedImports

    def test_into_the_stdlib_block_after_docstring_and_future(self) -> None:
        before = '''
            """Module docstring."""

            from __future__ import annotations

            import hashlib
            import logging
            from array import array
            from collections import deque

            import torch

            from sglang.srt.utils import get_ip

            logger = logging.getLogger(__name__)
        '''
        after = '''
            """Module docstring."""

            from __future__ import annotations

            import hashlib
            import logging
            import os
            import time
            from array import array
            from collections import deque

            import torch

            from sglang.srt.utils import get_ip

            logger = logging.getLogger(__name__)
        '''
        self.assertCodemod(before, after, imports=OS_TIME)

    def test_first_of_its_section(self) -> None:
        before = """
            from __future__ import annotations

            import threading
            from typing import List

            import torch
        """
        after = """
            from __future__ import annotations

            import os
            import threading
            import time
            from typing import List

            import torch
        """
        self.assertCodemod(before, after, imports=OS_TIME)

    def test_new_stdlib_section_between_future_and_third_party(self) -> None:
        before = """
            from __future__ import annotations

            import torch

            from sglang.srt.utils import get_ip
        """
        after = """
            from __future__ import annotations

            import os
            import time

            import torch

            from sglang.srt.utils import get_ip
        """
        self.assertCodemod(before, after, imports=OS_TIME)

    def test_new_stdlib_section_before_third_party_without_future(self) -> None:
        before = """
            import torch

            x = 1
        """
        after = """
            import time

            import torch

            x = 1
        """
        self.assertCodemod(before, after, imports=[ImportRequest("time")])

    def test_already_imported_is_not_duplicated(self) -> None:
        before = """
            import os
            import time
        """
        self.assertCodemod(before, before, imports=OS_TIME)

    def test_type_checking_import_does_not_count(self) -> None:
        before = """
            import logging
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                import time
        """
        after = """
            import logging
            import time
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                import time
        """
        self.assertCodemod(before, after, imports=[ImportRequest("time")])

    def test_merge_a_name_into_an_existing_from_import(self) -> None:
        before = """
            import logging

            from sglang.srt.utils import get_local_ip_by_remote
        """
        after = """
            import logging

            from sglang.srt.utils import get_int_env_var, get_local_ip_by_remote
        """
        self.assertCodemod(
            before, after, imports=[ImportRequest("sglang.srt.utils", "get_int_env_var")]
        )

    def test_merged_import_is_wrapped_the_way_isort_wraps_it(self) -> None:
        before = """
            from sglang.srt.utils import (
                get_free_port,
                get_ip,
                get_local_ip_by_remote,
                get_zmq_socket_with_a_long_name,
            )
        """
        after = """
            from sglang.srt.utils import (
                get_free_port,
                get_int_env_var,
                get_ip,
                get_local_ip_by_remote,
                get_zmq_socket_with_a_long_name,
            )
        """
        self.assertCodemod(
            before, after, imports=[ImportRequest("sglang.srt.utils", "get_int_env_var")]
        )

    def test_target_isort_settings_decide_the_position(self) -> None:
        # force_sort_within_sections: "from x import" sorts among "import x" by module name.
        before = """
            import logging
            from collections import deque
            from typing import List
        """
        after = """
            import logging
            from collections import deque
            import time
            from typing import List
        """
        config = isort.Config(profile="black", force_sort_within_sections=True)
        self.assertCodemod(before, after, imports=[ImportRequest("time")], isort_config=config)

    def test_crlf_file_gets_crlf_import(self) -> None:
        before = "import logging\r\nimport threading\r\n"
        module = cst.parse_module(before)
        out = AddIsortedImports(CodemodContext(), [ImportRequest("os")]).transform_module(module)
        assert out.code == "import logging\r\nimport os\r\nimport threading\r\n"

    def test_command_line_form(self) -> None:
        before = "import logging\n"
        after = "import logging\nimport time\nfrom os import environ\n"
        self.assertCodemod(before, after, imports=["time", "os:environ"])


@pytest.mark.parametrize(
    ("imports", "expected"),
    [
        ("import time\n", "time.monotonic"),
        ("import time as _t\n", "_t.monotonic"),
        ("from time import monotonic\n", "monotonic"),
        ("from time import monotonic as mono\n", "mono"),
        ("import logging\n", None),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import time\n", None),
    ],
)
def test_reference_to_reuses_existing_bindings(imports: str, expected: str | None) -> None:
    assert reference_to(ast.parse(imports), "time", "monotonic") == expected


def test_pdguard_names_the_files_isort_reads_its_settings_from() -> None:
    """``pdguard.tree.CONFIG_SOURCES`` stands in for isort's own list, so that a tree
    without settings files is read without importing isort."""
    from isort.settings import CONFIG_SOURCES

    from pdguard.tree import CONFIG_SOURCES as OURS

    assert tuple(OURS) == tuple(CONFIG_SOURCES)
