"""``pdguard check``: run the rules (``checks.RULES``) on a tree, keep the findings the user
asked for, and show them: ruff-like text, JSON, SARIF 2.1.0, GitHub annotations."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from pdguard import HOMEPAGE, __version__, cache, checks
from pdguard.checks import Finding, Project
from pdguard.checks.project import wanted

from ..errors import TargetError, UsageError, does_not_parse
from ..sglang_names import DISAGGREGATION_DIR, MANAGERS_DIR
from ..source_file import SourceFile
from ..suppressions import SuppressionWarning
from ..suppressions import parse as parse_suppressions
from ..tree import PREFILL_PATH, DirectoryTree, SourceTree, open_tree
from .base import EXIT_CHANGES, EXIT_OK, add_exit_zero, add_format, add_output_file, emit, relative
from .base import github_escape as _escape

if TYPE_CHECKING:
    from ..simulate import SimulationReport

NAME = "check"
HELP = "prove that every non-terminal poll path has a timeout"
_FIRST, _LAST = checks.CODES[0], checks.CODES[-1]
DESCRIPTION = f"Check an SGLang tree for the liveness properties (rules {_FIRST}-{_LAST})."


def epilog() -> str:
    rules = "\n".join(
        f"  {rule.code}  {rule.name:<30}{rule.summary.rstrip('.')}" for rule in checks.RULES
    )
    return f"""\
rules:
{rules}

A finding on a line that carries `# pdguard: ignore[PDG001]` (or a bare
`# pdguard: ignore`) is suppressed. Only those exact forms suppress: a malformed
comment or an unknown code suppresses nothing and prints a warning on stderr,
`path:line:col: warning: ...`.

`pdguard rule CODE` prints a rule's documentation; `pdguard rule --all` all of them.

exit codes: 0 no findings (or --exit-zero); 1 findings; 2 error (not SGLang, a file
that does not parse, an unknown rule code, an --output-file that cannot be written).
"""


# -- running the rules ----------------------------------------------------------------------


@dataclass
class CheckResult:
    tree: SourceTree
    findings: list[Finding]
    suppressed: int
    project: Project
    # Malformed suppression comments: (path relative to the tree's base, warning).
    warnings: list[tuple[str, SuppressionWarning]] = field(default_factory=list)

    def display_rel(self, rel: str) -> str:
        """A file of the tree as reports name it: relative to the current directory."""
        path = self.tree.display(rel)
        return relative(path) if isinstance(self.tree, DirectoryTree) else path

    def display_path(self, finding: Finding) -> str:
        return self.display_rel(finding.path)


def load_project(tree: SourceTree) -> Project:
    """The files the rules can need (text prefilter first), decoded."""
    texts = {}
    for rel in [*tree.python_files(DISAGGREGATION_DIR), *tree.python_files(MANAGERS_DIR)]:
        data = tree.read_bytes(rel)
        if data is None:
            continue
        text = SourceFile.decode(rel, data).text  # or a ParseError
        if rel == PREFILL_PATH or wanted(rel, text):
            texts[rel] = text
    return Project(texts)


def _parse_all(tree: SourceTree, project: Project) -> None:
    """Parse every file the rules may read, so that one that does not parse is an error
    whatever rules are selected (and names its own file and line)."""
    for rel, text in sorted(project.texts.items()):
        try:
            project.tree(rel)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            raise does_not_parse(tree.display(rel), exc, text) from exc


def check_tree(tree: SourceTree, codes: Iterable[str] = checks.STATIC_CODES) -> CheckResult:
    project = load_project(tree)
    _parse_all(tree, project)
    return check_project(tree, project, codes)


def check_project(
    tree: SourceTree, project: Project, codes: Iterable[str] = checks.STATIC_CODES
) -> CheckResult:
    """The findings of the rules ``codes`` on ``project`` that no comment suppresses (and the
    warnings of malformed suppressions): what ``pdguard check`` reports, also for ``apply``'s
    re-check. With PDG009 among ``codes`` the tree's code is run in the simulation's sandbox
    (``check --confirm``)."""
    codes = list(codes)
    if checks.CONFIRM_CODE in codes:
        from ..simulate import confirm

        confirm.attach(project, tree)
    try:
        found = checks.run(project, codes)
    except SyntaxError as exc:
        raise does_not_parse(tree.display(exc.filename or ""), exc) from exc
    suppressions = {
        rel: parse_suppressions(text, checks.CODES) for rel, text in project.texts.items()
    }
    kept = [f for f in found if not suppressions[f.path].suppresses(f.line, f.code)]
    warnings = [(rel, w) for rel, s in sorted(suppressions.items()) for w in s.warnings]
    return CheckResult(tree, kept, len(found) - len(kept), project, warnings)


def suppression_warnings(project: Project) -> list[tuple[str, SuppressionWarning]]:
    """The malformed or unknown suppressions of ``project``'s files, by path."""
    return [
        (rel, warning)
        for rel, text in sorted(project.texts.items())
        for warning in parse_suppressions(text, checks.CODES).warnings
    ]


def select_codes(
    select: Sequence[str] | None, ignore: Sequence[str] | None, confirm: bool = False
) -> list[str]:
    """The rule codes to run, from --select/--ignore (comma-separated, prefixes allowed);
    PDG009 only with ``confirm`` (``--confirm``) or when selected by its own code."""

    def expand(values: Sequence[str]) -> set[str]:
        wanted_codes: set[str] = set()
        for value in values:
            for part in filter(None, (p.strip().upper() for p in value.split(","))):
                matches = {c for c in checks.CODES if c.startswith(part)}
                if not matches:
                    raise UsageError(
                        f"unknown rule code {part!r} (known: {', '.join(checks.CODES)})"
                    )
                wanted_codes |= matches
        return wanted_codes

    chosen = expand(select) if select is not None else set(checks.STATIC_CODES)
    if not confirm and not any(checks.CONFIRM_CODE in s.upper() for s in select or ()):
        chosen.discard(checks.CONFIRM_CODE)  # a prefix (PDG00) selects the static rules
    elif confirm:
        chosen.add(checks.CONFIRM_CODE)
    chosen -= expand(ignore) if ignore else set()
    if not chosen:
        raise UsageError("--select/--ignore leave no rule to run")
    return [c for c in checks.CODES if c in chosen]


def trees_for(paths: Sequence[str]) -> list[SourceTree]:
    """The SGLang trees to check: a tree for each directory argument, and the tree around each
    file argument (as pre-commit passes them). Files outside any SGLang tree are skipped."""
    trees: dict[Path, SourceTree] = {}
    tree: DirectoryTree | None
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            tree = open_tree(path)
        elif path.is_file():
            tree = _tree_around(path)
            if tree is None:
                continue
        else:
            raise TargetError(f"{path}: no such file or directory")
        trees.setdefault(tree.base.resolve(), tree)
    if not trees:
        raise TargetError(f"{', '.join(paths)}: not in an SGLang tree (no {PREFILL_PATH} above)")
    return list(trees.values())


def _tree_around(file: Path) -> DirectoryTree | None:
    for parent in file.resolve().parents:
        if (parent / PREFILL_PATH).is_file():
            return DirectoryTree(root=parent, base=parent)
    return None


# -- output ---------------------------------------------------------------------------------

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
HELP_URI = f"{HOMEPAGE}#rules"


def _rows(results: Sequence[CheckResult]) -> Iterator[tuple[str, Finding]]:
    for result in results:
        for finding in result.findings:
            yield result.display_path(finding), finding


def text(results: Sequence[CheckResult]) -> str:
    lines = [f"{path}:{f.line}:{f.col}: {f.code} {f.message}" for path, f in _rows(results)]
    count = len(lines)
    suppressed = sum(r.suppressed for r in results)
    tail = f" ({suppressed} suppressed)" if suppressed else ""
    lines.append(
        f"Found {count} finding{'s' if count != 1 else ''}{tail}."
        if count
        else f"All checks passed!{tail}"
    )
    return "\n".join(lines)


def finding_json(finding: Finding, path: str) -> dict[str, object]:
    """A finding as JSON shows it (``check`` and ``verify``), with ``path`` as shown."""
    f = finding
    return {
        "code": f.code,
        "path": path,
        "line": f.line,
        "col": f.col,
        "symbol": f.symbol,
        "message": f.message,
    }


def as_json(results: Sequence[CheckResult]) -> str:
    findings = [finding_json(f, path) for path, f in _rows(results)]
    return json.dumps({"findings": findings}, indent=2)


def _uri(path: str) -> str:
    """A relative URI reference for a display path: forward slashes, percent-encoded (a space
    or a `#` in a directory name must not end up raw in a SARIF `uri`)."""
    return quote(path.replace(os.sep, "/"))


SRCROOT = "%SRCROOT%"


def _artifact(path: str) -> dict[str, str]:
    """Where a finding is: relative to the current directory (``%SRCROOT%``, the repository
    root when pdguard runs there, as in CI), or an absolute ``file:`` URI outside it."""
    if os.path.isabs(path) or path.split(os.sep, 1)[0] == os.pardir:
        return {"uri": Path(path).resolve().as_uri()}
    return {"uri": _uri(path), "uriBaseId": SRCROOT}


def sarif(results: Sequence[CheckResult]) -> str:
    rules = []
    for rule in checks.RULES:
        title, body = rule.summary, rule.description
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": title},
                "fullDescription": {"text": body},
                "help": {"text": body},
                "helpUri": f"{HELP_URI}-{rule.code.lower()}",
                "defaultConfiguration": {"level": "error"},
            }
        )
    index = {rule.code: n for n, rule in enumerate(checks.RULES)}
    sarif_results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(path),
                        "region": {"startLine": f.line, "startColumn": f.col},
                    },
                    "logicalLocations": [{"fullyQualifiedName": f.symbol, "kind": "function"}],
                }
            ],
        }
        for path, f in _rows(results)
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pdguard",
                        "version": __version__,
                        "informationUri": HELP_URI.split("#")[0],
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(log, indent=2)


def github(results: Sequence[CheckResult]) -> str:
    return "\n".join(
        f"::error file={_escape(path, prop=True)},line={f.line},col={f.col},"
        f"title={_escape(f.code, prop=True)}::{_escape(f'{f.code} {f.message}')}"
        for path, f in _rows(results)
    )


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}


# -- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        default=["."],
        metavar="PATH",
        help="an SGLang tree (as for apply), or files inside one (as pre-commit passes them);"
        " default: .",
    )
    add_format(parser, FORMATS)
    add_output_file(parser, "pdguard.sarif")
    add_exit_zero(parser)
    parser.add_argument(
        "--select",
        action="append",
        metavar="CODES",
        help="run only these rules (comma-separated, repeatable; prefixes work: PDG00)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        metavar="CODES",
        help="do not run these rules (e.g. PDG006,PDG007)",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="also run `pdguard simulate`'s scenarios on the tree (text or json format)",
    )
    add_confirm(parser, default=False)
    cache.add_argument(parser)


def add_confirm(parser: argparse.ArgumentParser, default: bool) -> None:
    """``--confirm`` / ``--no-confirm``: run the tree's code (in the simulation's sandbox) as a
    second witness, PDG009 where it disagrees with the static rules (docs/confirm.md)."""
    parser.add_argument(
        "--confirm",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="run the tree's own code in simulate's sandbox as a second witness; where it "
        f"disagrees with the static rules, {checks.CONFIRM_CODE}"
        + (" (the default)" if default else ""),
    )


def run(args: argparse.Namespace) -> int:
    if args.simulate and args.format not in SIMULATE_FORMATS:
        raise UsageError("--simulate reports in --format text or json")
    codes = select_codes(args.select, args.ignore, args.confirm)
    trees = trees_for(args.paths)
    store = cache.ResultCache() if cache.enabled(args) else None
    results = [
        cache.check_tree_cached(
            tree, codes, store, compute=check_tree, load=load_project, result=CheckResult
        )
        for tree in trees
    ]
    for result in results:
        # a cached result keeps no warnings: they are cheap to read again from the texts
        warnings = result.warnings or suppression_warnings(result.project)
        for rel, warning in warnings:
            print(
                f"{result.display_rel(rel)}:{warning.line}:{warning.col}: warning: "
                f"{warning.message}",
                file=sys.stderr,
            )
    if checks.CONFIRM_CODE in codes:
        _warn_unconfirmed(results)
    failed = any(r.findings for r in results)
    output = FORMATS[args.format](results)
    if args.simulate:
        from ..simulate import run as simulate

        simulations = [simulate(tree) for tree in trees]
        failed = failed or not all(s.passed for s in simulations)
        output = SIMULATE_FORMATS[args.format](output, simulations)
    emit(output, args.output_file)
    return EXIT_CHANGES if failed and not args.exit_zero else EXIT_OK


def _warn_unconfirmed(results: Sequence[CheckResult]) -> None:
    """One line on stderr for each tree whose code could not be run: the static verdict
    stands alone there."""
    from ..simulate import confirm

    for result in results:
        why = confirm.why_not_confirmed(result.project)
        if why is not None:
            print(
                f"{result.tree.label}: warning: not confirmed ({checks.CONFIRM_CODE}), the "
                f"static verdict stands alone: {why}",
                file=sys.stderr,
            )


def _with_simulation_json(output: str, simulations: Sequence[SimulationReport]) -> str:
    from . import simulate

    payload = json.loads(output)
    payload["simulation"] = [json.loads(simulate.as_json(s)) for s in simulations]
    return json.dumps(payload, indent=2)


def _with_simulation_text(output: str, simulations: Sequence[SimulationReport]) -> str:
    from . import simulate

    return "\n\n".join([output, *(simulate.text(s) for s in simulations)])


# ``check --simulate``: the check report with the simulation's joined in, by format.
SIMULATE_FORMATS = {"text": _with_simulation_text, "json": _with_simulation_json}
