"""The shape of the pdguard package itself."""

from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path

from pdguard.layout import MAPPED
from tests.paths import ROOT

# Dotted package -> its folder in the checkout (pyproject.toml's package-dir mapping).
FOLDERS = {"pdguard": ROOT / "pdguard", **{f"pdguard.{name}": ROOT / name for name in MAPPED}}


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of pdguard (the mapped checks/ etc. included)."""
    found = {}
    for package, top in FOLDERS.items():
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for file in files:
                if file.endswith(".py"):
                    path = Path(folder) / file
                    parts = [*package.split("."), *path.relative_to(top).with_suffix("").parts]
                    if parts[-1] == "__init__":
                        parts.pop()
                    found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The pdguard modules one module imports, anywhere in it: at module level, in functions and
    under ``if TYPE_CHECKING:`` too. ``from package import submodule`` is an edge to the
    submodule only (the package itself is imported first by any of its submodules)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            edges.update(submodules if submodules <= modules.keys() else {base, *submodules})
    return {edge for edge in edges if edge in modules and edge != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_module_walk_sees_the_linked_packages():
    modules = _modules()
    assert {
        "pdguard.cli",
        "pdguard.checks.models.inflight",
        "pdguard.codemods.isort_imports",
    } <= set(modules)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_pdguard():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles = _cycles(graph)
    assert not cycles, "\n".join(
        " <-> ".join(cycle)
        + ": "
        + "; ".join(f"{m} -> {sorted(graph[m] & set(cycle))}" for m in cycle)
        for cycle in cycles
    )


def test_the_package_dir_mapping_installs_every_folder_with_no_symlink() -> None:
    """pyproject.toml lists every package (each folder with an __init__.py under pdguard/ and
    the mapped folders) and maps exactly pdguard.layout.MAPPED; nothing is a symlink."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {f"pdguard.{name}": name for name in MAPPED}
    on_disk = {
        ".".join([*package.split("."), *Path(folder).relative_to(top).parts])
        for package, top in FOLDERS.items()
        for folder, _, files in os.walk(top)
        if "__init__.py" in files
    }
    assert sorted(config["packages"]) == sorted(on_disk)
    links = [p for top in FOLDERS.values() for p in top.rglob("*") if p.is_symlink()]
    assert links == []


def test_sglang_paths_and_env_names_come_from_sglang_names() -> None:
    """No string in pdguard's code that is a path, a name or a pattern (no whitespace: not a
    docstring, a comment or a help text) spells an SGLang path or the bootstrap timeout's env
    name: pdguard.sglang_names is their one home."""
    from pdguard.sglang_names import BOOTSTRAP_TIMEOUT_ENV, DISAGGREGATION_DIR

    spelled = []
    for name, path in _modules().items():
        if name == "pdguard.sglang_names":
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and not any(c.isspace() for c in node.value)
                and ("sglang/srt/" in node.value or BOOTSTRAP_TIMEOUT_ENV in node.value)
            ):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert DISAGGREGATION_DIR.startswith("sglang/srt/")
    assert spelled == []
