"""How the inflight deadline reads ``SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT``: in the release's
own convention, at first use (never at import).

* ``registry``: where the release's typed environment (``sglang/srt/environ.py``) holds the
  sibling disaggregation timeouts (``SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)``,
  0.5.8+), the variable is an entry of that registry, of the same type, next to them
  (:class:`InflightTimeoutEntry`), and the deadline reads
  ``envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()``. ``EnvInt.get()`` itself rejects a
  value that is not a whole number (``nan``, ``inf``, ``abc``) with a warning naming the
  variable, and returns the default; ``.override()`` works in tests.
* ``get_int_env_var``: before that, the deadline reads
  ``get_int_env_var("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", 300)`` where it runs, as the
  release reads its sibling timeouts (``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``); like them,
  a value that is not a whole number gives the default.

In both, 0 (or less) turns the deadline off.
"""

from __future__ import annotations

import argparse
import ast

import libcst as cst

from pdguard.fix_names import ENV_GET_INT, ENV_REGISTRY
from pdguard.fix_names import INFLIGHT_DEADLINE as FIX
from pdguard.sglang_names import (
    BOOTSTRAP_TIMEOUT_ENV,
    ENVIRON_MODULE,
    ENVIRON_OBJECT,
    WAITING_TIMEOUT_ENV,
)
from pdguard.sglang_names import INFLIGHT_TIMEOUT_ENV as ENV_VAR

from .anchors import AnchorError, marker
from .command import Command
from .holes import Scope
from .insertion import StatementEdit, apply_edits, parse_statements
from .isort_imports import ImportRequest, reference_to, top_level_bindings

REGISTRY = ENV_REGISTRY
GET_INT_ENV_VAR = ENV_GET_INT
CONVENTIONS = (REGISTRY, GET_INT_ENV_VAR)
DEFAULT_TIMEOUT = 300
# The registry entries the new one joins, the one it follows first.
SIBLINGS = (WAITING_TIMEOUT_ENV, BOOTSTRAP_TIMEOUT_ENV)
# The registry type whose get() rejects a non-finite or non-numeric value (int() does).
ENTRY_TYPE = "EnvInt"
UTILS_MODULE = "sglang.srt.utils"

_ENTRY = """\
{marker}: seconds a request may wait in the prefill
# inflight queue for its KV transfer before it is failed; 0 (or less) turns it off.
{env} = {entry_type}({default})
"""


def registry_read(module: cst.Module) -> tuple[str, list[ImportRequest]]:
    """``envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()`` as ``prefill.py`` can spell it,
    and the import it still needs."""
    bound = top_level_bindings(module)
    for local, origin in bound.items():
        if origin == (ENVIRON_MODULE, ENVIRON_OBJECT):
            return f"{local}.{ENV_VAR}.get()", []
    if ENVIRON_OBJECT in bound:
        raise AnchorError(f"`{ENVIRON_OBJECT}` is bound to something else than {ENVIRON_MODULE}'s")
    return f"{ENVIRON_OBJECT}.{ENV_VAR}.get()", [ImportRequest(ENVIRON_MODULE, ENVIRON_OBJECT)]


def reader_setting(
    module: cst.Module, checked: ast.Module
) -> tuple[dict[str, str], list[ImportRequest]]:
    """The names the ``get_int_env_var`` reader is written with in ``module`` (``checked``:
    its whole text parsed with ``ast``), and the imports it needs."""
    imports: list[ImportRequest] = []
    names: dict[str, str] = {}
    for key, origin, attr in (("get_int_env_var", UTILS_MODULE, "get_int_env_var"),):
        existing = reference_to(checked, origin, attr)
        if existing is None:
            if attr in top_level_bindings(module):
                raise AnchorError(f"`{attr}` is bound to something else than {origin}'s")
            existing = attr
            imports.append(ImportRequest(origin, attr))
        names[key] = existing
    return names, imports


class InflightTimeoutEntry(Command):
    DESCRIPTION: str = (
        "Add SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT to SGLang's env registry (environ.py), "
        "next to its sibling timeouts and of their type."
    )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        pass

    def scope(self, text: str) -> Scope:
        """The registry entries of the sibling timeouts."""
        return Scope(mentions=frozenset(SIBLINGS))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        anchor, entry_type = _sibling_statement(tree)
        if entry_type != ENTRY_TYPE:
            raise AnchorError(
                f"the sibling timeouts are {entry_type} entries; pdguard writes {ENTRY_TYPE} "
                "ones, whose get() rejects a value that is not a whole number"
            )
        code = _ENTRY.format(
            marker=marker(FIX), env=ENV_VAR, entry_type=entry_type, default=DEFAULT_TIMEOUT
        )
        entry = parse_statements(code, tree.config_for_parsing)
        return apply_edits(tree, [(anchor, StatementEdit(after=entry))])


def _sibling_statement(tree: cst.Module) -> tuple[cst.SimpleStatementLine, str]:
    """The registry entry of a sibling timeout in a class body, and its Env type."""
    for sibling in SIBLINGS:
        for cls in tree.body:
            if not isinstance(cls, cst.ClassDef) or not isinstance(cls.body, cst.IndentedBlock):
                continue
            for stmt in cls.body.body:
                entry_type = _entry_type(stmt, sibling)
                if entry_type is not None and isinstance(stmt, cst.SimpleStatementLine):
                    return stmt, entry_type
    raise AnchorError(f"no registry entry {' or '.join(SIBLINGS)} to add {ENV_VAR} next to")


def _entry_type(stmt: cst.BaseStatement, name: str) -> str | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    assign = stmt.body[0]
    if (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == name
        and isinstance(assign.value, cst.Call)
        and isinstance(assign.value.func, cst.Name)
    ):
        return assign.value.func.value
    return None
