"""Add imports where the target's own isort settings put them.

LibCST's ``AddImportsVisitor`` appends new imports after the last import of the module, which
isort then moves. This codemod asks isort itself: the section of a new import comes from
``isort.place_module`` and its position inside that section from isort's own ordering of the
new statement against each existing statement of the section. A name added to an existing
``from m import ...`` statement is merged into it and the statement is re-rendered by isort.

Only the leading import block of the module is considered (imports under ``if TYPE_CHECKING:``,
inside functions or after the first other statement bind nothing at import time, or are not
isort's business), and a module or name that is already bound there is never imported twice.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from pdguard.checks.bindings import bindings_in_force, imported_as
from pdguard.checks.nodes import walk

from .anchors import AnchorError, is_docstring
from .command import Command
from .holes import Scope
from .insertion import Statement

if TYPE_CHECKING:
    import isort


@cache
def default_isort_config() -> isort.Config:
    """SGLang's own isort settings (``profile=black``, ``sglang`` first party), for a tree that
    has none. isort is imported on first use: a transform that adds no import never needs it."""
    import isort

    return isort.Config(profile="black", known_first_party=frozenset({"sglang"}))


@dataclass(frozen=True)
class ImportRequest:
    """``import module [as asname]`` (``name`` is None) or ``from module import name [as
    asname]``."""

    module: str
    name: str | None = None
    asname: str | None = None

    @property
    def local(self) -> str:
        """The name the import binds."""
        return self.asname or self.name or self.module.split(".")[0]

    @property
    def line(self) -> str:
        alias = f" as {self.asname}" if self.asname else ""
        if self.name is None:
            return f"import {self.module}{alias}"
        return f"from {self.module} import {self.name}{alias}"


def import_requests(imports: Sequence[ImportRequest | str]) -> list[ImportRequest]:
    """``imports`` as requests; a string is ``module`` or ``module:name`` (``--import``)."""
    return [i if isinstance(i, ImportRequest) else ImportRequest(*i.split(":", 1)) for i in imports]


def add_import_args(arg_parser: argparse.ArgumentParser) -> None:
    """``--import``, for a transform whose setting needs an import."""
    arg_parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        help="'module' or 'module:name' the timeout setting needs",
    )


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    raise TypeError(type(node).__name__)


def _import_statements(stmt: cst.CSTNode) -> list[cst.Import | cst.ImportFrom] | None:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    imports = [s for s in stmt.body if isinstance(s, cst.Import | cst.ImportFrom)]
    return imports if len(imports) == len(stmt.body) else None


def leading_import_block(module: cst.Module) -> list[int]:
    """Indices of the module's top-level import statements before the first other statement."""
    indices: list[int] = []
    for index, stmt in enumerate(module.body):
        if index == 0 and is_docstring(stmt):
            continue
        if _import_statements(stmt) is None:
            break
        indices.append(index)
    return indices


def _import_line(stmt: Statement) -> cst.SimpleStatementLine:
    """A statement of the leading import block (``leading_import_block`` keeps only these)."""
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt


def _module_of(stmt: cst.SimpleStatementLine) -> str:
    first = stmt.body[0]
    if isinstance(first, cst.Import):
        return _dotted(first.names[0].name)
    assert isinstance(first, cst.ImportFrom)
    if first.relative:
        return "." * len(first.relative) + (_dotted(first.module) if first.module else "")
    return _dotted(first.module) if first.module else ""


def top_level_bindings(module: cst.Module) -> dict[str, tuple[str, str | None]]:
    """Names bound by the leading import block: local name -> (module, imported name or None)."""
    bound: dict[str, tuple[str, str | None]] = {}
    for index in leading_import_block(module):
        for imp in _import_statements(module.body[index]) or []:
            if isinstance(imp, cst.Import):
                for alias in imp.names:
                    dotted = _dotted(alias.name)
                    if alias.asname is not None:
                        bound[_dotted(alias.asname.name)] = (dotted, None)
                    else:
                        bound[dotted.split(".")[0]] = (dotted.split(".")[0], None)
            elif (
                not imp.relative
                and imp.module is not None
                and not isinstance(imp.names, cst.ImportStar)
            ):
                for alias in imp.names:
                    local = alias.asname.name if alias.asname else alias.name
                    bound[_dotted(local)] = (_dotted(imp.module), _dotted(alias.name))
    return bound


def reference_to(checked: ast.Module, module_name: str, attr: str) -> str | None:
    """How code in ``checked`` (a module's whole text parsed with ``ast``: ``Command.checked``,
    ``Workspace.ast``) can spell ``module_name.attr`` with the imports it has, if any.

    ``import time`` gives ``time.monotonic``, ``import time as _t`` gives ``_t.monotonic`` and
    ``from time import monotonic as mono`` gives ``mono``. Only a binding still in force at
    module level counts: after ``import time`` and then ``from datetime import time``, ``time``
    is datetime's.
    """
    in_force = bindings_in_force(checked.body)
    found = None
    for local, stmt in in_force.items():
        bound = imported_as(local, stmt)
        if bound == (module_name, attr):
            return local
        if bound == (module_name, None) and found is None:
            found = f"{local}.{attr}"
    return found


def spelling(checked: ast.Module, module_name: str, attr: str) -> tuple[str, ImportRequest | None]:
    """How to spell ``module_name.attr`` in the module ``checked`` (parsed with ``ast``), and
    the import to add for it, if any: a binding in force is reused; otherwise ``import
    module_name``, or, where that name is already bound to something else (``from datetime
    import time``), an import under a free alias (``import time as _time``), so that neither
    the module's code nor ours breaks."""
    existing = reference_to(checked, module_name, attr)
    if existing is not None:
        return existing, None
    local = module_name.split(".")[0]
    taken = names_used(checked)
    if local not in taken:
        return f"{module_name}.{attr}", ImportRequest(module_name)
    for alias in (f"_{local}", f"_{local}_module", f"_pdguard_{local}"):
        if alias not in taken:
            return f"{alias}.{attr}", ImportRequest(module_name, asname=alias)
    raise AnchorError(f"no free name to import {module_name} under")


def name_spelling(
    checked: ast.Module, module_name: str, name: str
) -> tuple[str, ImportRequest | None]:
    """How to name ``module_name.name`` (a class, ``typing.Optional``) in the module
    ``checked`` (parsed with ``ast``): a
    binding in force is reused, else ``from module_name import name`` where that name is free,
    else as ``spelling`` gives it."""
    existing = reference_to(checked, module_name, name)
    if existing is not None:
        return existing, None
    if name not in names_used(checked):
        return name, ImportRequest(module_name, name)
    return spelling(checked, module_name, name)


def names_used(checked: ast.Module) -> set[str]:
    """Every identifier the module ``checked`` (parsed with ``ast``) binds or reads anywhere
    (a name we bind must clash with none of them)."""
    names: set[str] = set()
    for node in walk(checked):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _sorts_before(new_line: str, existing: cst.SimpleStatementLine, config: isort.Config) -> bool:
    import isort

    existing_code = cst.Module(body=[existing.with_changes(leading_lines=[])]).code
    sorted_code = isort.code(f"{new_line}\n{existing_code}", config=config)
    return sorted_code.lstrip().startswith(new_line)


def _already_bound(tree: cst.Module, request: ImportRequest) -> bool:
    """Does the leading import block already bind what ``request`` would?"""
    wanted = (request.module if request.name or request.asname else request.local, request.name)
    return top_level_bindings(tree).get(request.local) == wanted


def _from_import_of(body: Sequence[Statement], block: list[int], module: str) -> int | None:
    """The index of the first ``from <module> import ...`` statement of the block to merge a name
    into (absolute, not ``*``, alone on its line)."""
    for index in block:
        stmt = _import_line(body[index])
        first = stmt.body[0]
        if (
            isinstance(first, cst.ImportFrom)
            and len(stmt.body) == 1
            and not first.relative
            and first.module is not None
            and _dotted(first.module) == module
            and not isinstance(first.names, cst.ImportStar)
        ):
            return index
    return None


def _blank() -> cst.EmptyLine:
    return cst.EmptyLine(indent=False)


class AddIsortedImports(Command):
    """Add the imports a generated snippet needs, at the positions isort would give them."""

    DESCRIPTION: str = __doc__ or ""

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--import",
            dest="imports",
            action="append",
            required=True,
            help="'module' or 'module:name' to import; repeat for several",
        )

    def __init__(
        self,
        context: CodemodContext,
        imports: Sequence[ImportRequest | str],
        isort_config: isort.Config | None = None,
    ) -> None:
        super().__init__(context)
        self.requests = import_requests(imports)
        self.isort_config = isort_config

    @property
    def config(self) -> isort.Config:
        """The target's isort settings, else ``default_isort_config()``."""
        return self.isort_config if self.isort_config is not None else default_isort_config()

    def scope(self, text: str) -> Scope:
        """Module-level statements: the imports."""
        return Scope()

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        for request in self.requests:
            tree = self._add(tree, request)
        return tree

    def _add(self, tree: cst.Module, request: ImportRequest) -> cst.Module:
        if _already_bound(tree, request):
            return tree
        import isort

        block = leading_import_block(tree)
        body = list(tree.body)
        if request.name is not None and request.asname is None:
            index = _from_import_of(body, block, request.module)
            if index is not None:
                body[index] = self._merge(_import_line(body[index]), request.name)
                return tree.with_changes(body=body)
        new_stmt = cst.parse_statement(request.line)
        section = isort.place_module(request.module, config=self.config)
        same = [i for i in block if self._section_of(_import_line(body[i])) == section]
        if same:
            self._insert_in_section(body, same, request.line, new_stmt)
        else:
            self._insert_new_section(body, block, section, new_stmt)
        return tree.with_changes(body=body)

    def _section_of(self, stmt: cst.SimpleStatementLine) -> str:
        import isort

        return isort.place_module(_module_of(stmt), config=self.config)

    def _insert_in_section(
        self, body: list[Statement], same: list[int], line: str, new_stmt: Statement
    ) -> None:
        """Insert ``new_stmt`` (``line``) into ``body`` among the statements of its own section
        (indices ``same``), before the first one isort sorts after it."""
        after = None
        for i in same:
            if _sorts_before(line, _import_line(body[i]), self.config):
                break
            after = i
        if after is not None:
            body.insert(after + 1, new_stmt.with_changes(leading_lines=[]))
        else:
            first = body[same[0]]
            body[same[0]] = first.with_changes(leading_lines=[])
            body.insert(same[0], new_stmt.with_changes(leading_lines=first.leading_lines))

    def _insert_new_section(
        self,
        body: list[Statement],
        block: list[int],
        section: str,
        new_stmt: Statement,
    ) -> None:
        """Insert ``new_stmt`` into ``body`` as a section of its own: after the sections isort
        puts before it, before the ones after it."""
        rank = {name: i for i, name in enumerate(self.config.sections)}
        earlier = [
            i for i in block if rank.get(self._section_of(_import_line(body[i])), 0) < rank[section]
        ]
        later = [i for i in block if i not in earlier]
        if later and (not earlier or later[0] > earlier[-1]):
            first = body[later[0]]
            body[later[0]] = first.with_changes(leading_lines=[_blank()])
            body.insert(later[0], new_stmt.with_changes(leading_lines=first.leading_lines))
            return
        at = earlier[-1] + 1 if earlier else 1 if body and is_docstring(body[0]) else 0
        lead = [_blank()] if at > 0 else []
        if at < len(body):
            following = body[at]
            if not any(line.comment is None for line in following.leading_lines):
                body[at] = following.with_changes(
                    leading_lines=[_blank(), *following.leading_lines]
                )
        body.insert(at, new_stmt.with_changes(leading_lines=lead))

    def _merge(self, stmt: cst.SimpleStatementLine, name: str) -> Statement:
        import isort

        imp = stmt.body[0]
        assert isinstance(imp, cst.ImportFrom) and not isinstance(imp.names, cst.ImportStar)
        names = [cst.ImportAlias(name=alias.name, asname=alias.asname) for alias in imp.names]
        if any(_dotted(alias.name) == name and alias.asname is None for alias in names):
            return stmt
        names.append(cst.ImportAlias(name=cst.Name(name)))
        merged = stmt.with_changes(
            body=[imp.with_changes(names=names, lpar=None, rpar=None)], leading_lines=[]
        )
        rendered = isort.code(cst.Module(body=[merged]).code, config=self.config)
        new_stmt = cst.parse_statement(rendered)
        return new_stmt.with_changes(leading_lines=stmt.leading_lines)
