"""``pdguard check``: run the rules (``checks.RULES``) on a tree, keep the findings the user
asked for, and show them: ruff-like text, JSON, SARIF 2.1.0, GitHub annotations."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from pdguard import HOMEPAGE, __version__, cache, checks
from pdguard.checks import Finding, Project
from pdguard.checks.project import TEXT_ONLY, base_files, wanted
from pdguard.docs import rule_url

from .. import config, terminal
from ..errors import ParseError, TargetError, UsageError, does_not_parse
from ..run import Run
from ..sglang_names import DISAGGREGATION_DIR, ENVIRON_PATH, MANAGERS_DIR
from ..source_file import SourceFile
from ..suppressions import SuppressionWarning
from ..suppressions import parse as parse_suppressions
from ..tree import PREFILL_PATH, DirectoryTree, SourceTree, find_tree, installed_tree
from .base import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    add_exit_zero,
    add_format,
    add_installed,
    add_output_file,
    add_quiet,
    annotation_path,
    emit,
    shown_path,
    workspace,
    workspace_rel,
)
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
`# pdguard: ignore`), optionally followed by a reason (`-- why`), is suppressed.
Only those exact forms suppress: a malformed comment or an unknown code suppresses
nothing and prints a warning on stderr, `path:line:col: warning: ...`.

Settings: [tool.pdguard] in the nearest pyproject.toml (select, ignore,
[tool.pdguard.fix.NAME] enabled), or --config FILE; --isolated reads none.
--fix applies the fixes first (as `pdguard apply`), then checks. docs/cli.md.

`pdguard rule CODE` prints a rule's documentation; `pdguard rule --all` all of them.

exit codes: 0 no findings (or --exit-zero); 1 findings; 2 error (not SGLang, a file
that does not parse, an unknown rule code, an --output-file that cannot be written).
"""


# -- running the rules ----------------------------------------------------------------------


# A file that does not parse is reported as a diagnostic of this code in every format (ruff's
# syntax errors), besides the one error line on stderr and exit 2.
SYNTAX_CODE = "E999"
SYNTAX_NAME = "syntax-error"


@dataclass
class CheckResult:
    tree: SourceTree
    findings: list[Finding]
    suppressed: int
    project: Project
    # Malformed suppression comments: (path relative to the tree's base, warning).
    warnings: list[tuple[str, SuppressionWarning]] = field(default_factory=list)
    # Files that do not parse (code SYNTAX_CODE): the rules did not run on this tree.
    errors: list[Finding] = field(default_factory=list)

    def display_rel(self, rel: str) -> str:
        """A file of the tree as reports name it (``base.shown_path``): relative to the current
        directory, or absolute outside it."""
        path = self.tree.display(rel)
        return shown_path(path) if isinstance(self.tree, DirectoryTree) else path

    def annotation_rel(self, rel: str) -> str:
        """A file as a GitHub annotation names it: a relative path, never ``../``."""
        path = self.tree.display(rel)
        if isinstance(self.tree, DirectoryTree):
            return annotation_path(path, self.tree.root)
        return path

    def absolute(self, rel: str) -> str | None:
        """The file on disk (SARIF names a file outside the current directory by it)."""
        if isinstance(self.tree, DirectoryTree):
            return os.path.abspath(self.tree.display(rel))
        return None

    def display_path(self, finding: Finding) -> str:
        return self.display_rel(finding.path)


def syntax_result(tree: SourceTree, error: ParseError) -> CheckResult:
    """The result for a tree one of whose files does not parse: that file's diagnostic, the
    one ``E999`` every command reports (``check``, ``apply``, ``verify``)."""
    why = error.why or " ".join(str(error).splitlines())
    finding = Finding(error.rel or "", error.line, error.col, SYNTAX_CODE, "", why)
    return CheckResult(tree, [], 0, Project({}), errors=[finding])


def where(path: str, finding: Finding) -> str:
    """``PATH:LINE:COL``: a finding's place as text reports and error lines give it."""
    return f"{path}:{finding.line}:{finding.col}"


def text_line(path: str, finding: Finding) -> str:
    """A finding as the text report shows it: ``PATH:LINE:COL: CODE message`` (ruff's)."""
    return _lead(path, finding) + finding.message


def _lead(path: str, finding: Finding) -> str:
    return f"{where(path, finding)}: {finding.code} "


def error_line(path: str, finding: Finding) -> str:
    """The one error line's reason for a diagnostic (``E999``): ``PATH:LINE:COL: message``."""
    return f"{where(path, finding)}: {finding.message}"


def annotation(path: str, finding: Finding) -> str:
    """A finding as a GitHub annotation (``path``: relative, never ``../``)."""
    f = finding
    return (
        f"::error file={_escape(path, prop=True)},line={f.line},col={f.col},"
        f"title={_escape(f.code, prop=True)}::{_escape(f'{f.code} {f.message}')}"
    )


def load_project(tree: SourceTree, run: Run | None = None) -> Project:
    """The files the rules can need (text prefilter first), decoded; parsed in ``run``."""
    texts = {}
    others = {}
    for rel in [*tree.python_files(DISAGGREGATION_DIR), *tree.python_files(MANAGERS_DIR)]:
        data = tree.read_bytes(rel)
        if data is None:
            continue
        text = SourceFile.decode(rel, data).text  # or a ParseError
        if rel == PREFILL_PATH or wanted(rel, text):
            texts[rel] = text
        else:
            others[rel] = text
    texts.update(base_files(texts, others, run))  # a base class in a file no needle names
    data = tree.read_bytes(ENVIRON_PATH)  # the env registry, read as text (PDG005)
    if data is not None:
        texts[ENVIRON_PATH] = SourceFile.decode(ENVIRON_PATH, data).text
    return Project(texts, run)


def _parse_all(tree: SourceTree, project: Project) -> None:
    """Parse every file the rules may read, so that one that does not parse is an error
    whatever rules are selected (and names its own file and line)."""
    for rel, text in sorted(project.texts.items()):
        if rel in TEXT_ONLY:
            continue
        try:
            project.tree(rel)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            raise does_not_parse(tree.display(rel), exc, text, rel) from exc


def check_tree(
    tree: SourceTree, codes: Iterable[str] = checks.STATIC_CODES, run: Run | None = None
) -> CheckResult:
    project = load_project(tree, run)
    _parse_all(tree, project)
    return check_project(tree, project, codes)


def check_project(
    tree: SourceTree, project: Project, codes: Iterable[str] = checks.STATIC_CODES
) -> CheckResult:
    """The findings of the rules ``codes`` on ``project`` that no comment suppresses (and the
    warnings of malformed suppressions): the one verdict on a tree. ``pdguard check`` reports
    it, ``apply``'s re-check refuses a fix by it, ``verify`` calls a fix drifted by it. With
    PDG009 among ``codes`` the tree's code is run in the simulation's sandbox (``check
    --confirm``)."""
    codes = list(codes)
    if checks.CONFIRM_CODE in codes:
        from ..simulate import confirm

        confirm.attach(project, tree)
    try:
        found = checks.run(project, codes)
    except SyntaxError as exc:
        rel = exc.filename or ""
        raise does_not_parse(tree.display(rel), exc, rel=rel) from exc
    suppressions = {
        rel: parse_suppressions(text, checks.CODES, project.run)
        for rel, text in project.texts.items()
    }
    kept = [f for f in found if not suppressions[f.path].suppresses(f.line, f.code)]
    warnings = [(rel, w) for rel, s in sorted(suppressions.items()) for w in s.warnings]
    return CheckResult(tree, kept, len(found) - len(kept), project, warnings)


def suppression_warnings(project: Project) -> list[tuple[str, SuppressionWarning]]:
    """The malformed or unknown suppressions of ``project``'s files, by path."""
    return [
        (rel, warning)
        for rel, text in sorted(project.texts.items())
        for warning in parse_suppressions(text, checks.CODES, project.run).warnings
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
    """The SGLang trees to check: the tree at, or around, each directory argument
    (``find_tree``: a subdirectory finds its checkout), and the tree around each file argument
    (as pre-commit passes them). Files outside any SGLang tree are skipped."""
    trees: dict[Path, SourceTree] = {}
    tree: DirectoryTree | None
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            tree = find_tree(path)
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


# A finding as the report's views tell it apart: (the tree's label, the finding).
Located = tuple[str, Finding]
# ``apply.would_fix``: (a result, the rule codes, the disabled fixes) -> (the findings apply
# would fix by (path, code), a line for each fix it would refuse)
WouldFix = Callable[
    [CheckResult, Sequence[str], Iterable[str]], tuple[Counter[tuple[str, str]], list[str]]
]


@dataclass(frozen=True)
class View:
    """How the report is shown: ``statistics`` (counts by code), ``quiet`` (no summary),
    ``fixable`` (the findings ``pdguard apply`` fixes, ``fixable_findings``), ``fixed`` (the
    findings ``--fix`` fixed), ``fixes`` (``--show-fixes``: the listing of what was, or would
    be, fixed)."""

    statistics: bool = False
    quiet: bool = False
    fixable: frozenset[Located] = frozenset()
    fixed: int = 0
    wrap: bool = False  # wrap long messages (text on a terminal)
    fixes: tuple[str, ...] = ()

    def is_fixable(self, result: CheckResult, finding: Finding) -> bool:
        return (result.tree.label, finding) in self.fixable


def _rows(results: Sequence[CheckResult]) -> Iterator[tuple[str, Finding]]:
    for _, path, finding in _located(results):
        yield path, finding


def _located(results: Sequence[CheckResult]) -> Iterator[tuple[CheckResult, str, Finding]]:
    for result in results:
        for finding in [*result.errors, *result.findings]:
            yield result, result.display_path(finding), finding


def _names() -> dict[str, str]:
    return {SYNTAX_CODE: SYNTAX_NAME, **{rule.code: rule.name for rule in checks.RULES}}


def statistics(results: Sequence[CheckResult], view: View = View()) -> list[dict[str, object]]:
    """Findings counted by code, most first (ruff's ``--statistics``); ``fixable``: how many
    of them ``pdguard apply`` fixes."""
    counts = Counter(f.code for _, f in _rows(results))
    fixable = Counter(f.code for r, _, f in _located(results) if view.is_fixable(r, f))
    names = _names()
    order = {code: n for n, code in enumerate(names)}
    return [
        {
            "code": code,
            "name": names.get(code, code),
            "count": count,
            "fixable": bool(fixable[code]),
        }
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], order.get(item[0])))
    ]


def text(results: Sequence[CheckResult], view: View = View()) -> str:
    lines = []
    if view.statistics:
        for row in statistics(results, view):
            mark = "[*]" if row["fixable"] else "[ ]"
            lines.append(f"{row['count']:>5}  {row['code']:<7} {mark} {row['name']}")
    else:
        for path, f in _rows(results):
            wrap = view.wrap
            lines.extend(terminal.wrap(_lead(path, f), f.message) if wrap else [text_line(path, f)])
    if not view.quiet:
        lines.extend(view.fixes)
        lines.extend(summary_lines(results, view))
    return "\n".join(lines)


def summary_lines(results: Sequence[CheckResult], view: View = View()) -> list[str]:
    """``Found N findings (M suppressed, K fixed).`` and ``[*] J fixable with `pdguard apply`.``;
    never "All checks passed!" for a tree that did not parse."""
    located = list(_located(results))
    count = len(located)
    suppressed = sum(r.suppressed for r in results)
    extra = [f"{suppressed} suppressed"] if suppressed else []
    extra += [f"{view.fixed} fixed"] if view.fixed else []
    tail = f" ({', '.join(extra)})" if extra else ""
    if not count:
        return [f"All checks passed!{tail}"]
    lines = [f"Found {count} finding{'s' if count != 1 else ''}{tail}."]
    fixable = sum(view.is_fixable(r, f) for r, _, f in located)
    if fixable:
        lines.append(f"[*] {fixable} fixable with `pdguard apply` (or `pdguard check --fix`).")
    return lines


_TEXT_LINE = re.compile(r"^(?P<path>\S.*?):(?P<pos>\d+:\d+): (?P<code>[A-Z]+\d+) ")


def coloured(report: str) -> str:
    """A text report for a terminal: the path bold, the code red, the summary bold."""
    lines = []
    for line in report.split("\n"):
        match = _TEXT_LINE.match(line)
        if match:
            line = (
                f"{terminal.paint(match['path'], terminal.BOLD)}:{match['pos']}: "
                f"{terminal.paint(match['code'], terminal.BOLD, terminal.RED)} "
                + line[match.end() :]
            )
        elif line.startswith(("Found ", "All checks passed!", "[*] ", "Fixed ", "Would fix ")):
            colour = terminal.GREEN if line.startswith("All") else terminal.BOLD
            line = terminal.paint(line, colour)
        lines.append(line)
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


def as_json(results: Sequence[CheckResult], view: View = View()) -> str:
    if view.statistics:
        return json.dumps(statistics(results, view), indent=2)
    findings = [
        {**finding_json(f, path), "fixable": view.is_fixable(r, f)}
        for r, path, f in _located(results)
    ]
    return json.dumps({"findings": findings}, indent=2)


def _uri(path: str) -> str:
    """A relative URI reference for a display path: forward slashes, percent-encoded (a space
    or a `#` in a directory name must not end up raw in a SARIF `uri`)."""
    return quote(path.replace(os.sep, "/"))


SRCROOT = "%SRCROOT%"


def _artifact(path: str, absolute: str | None) -> dict[str, str]:
    """Where a finding is: in a GitHub workflow, relative to its workspace (``%SRCROOT%``: the
    repository's checkout, from which code scanning resolves a relative ``uri``) when the file
    lies in it; elsewhere relative to the current directory (``%SRCROOT%`` then) when it lies
    below it; else an absolute ``file:`` URI."""
    if workspace() is not None:
        rel = workspace_rel(absolute) if absolute is not None else None
        if rel is not None:
            return {"uri": _uri(rel), "uriBaseId": SRCROOT}
        if absolute is not None or os.path.isabs(path):
            return {"uri": Path(absolute or path).resolve().as_uri()}
        return {"uri": _uri(path), "uriBaseId": SRCROOT}  # a git tree's: from the repo root
    if absolute is not None and Path(absolute).resolve().is_relative_to(Path.cwd().resolve()):
        return {"uri": _uri(path), "uriBaseId": SRCROOT}
    if absolute is None and not os.path.isabs(path) and path.split(os.sep, 1)[0] != os.pardir:
        return {"uri": _uri(path), "uriBaseId": SRCROOT}
    return {"uri": Path(absolute or path).resolve().as_uri()}


SYNTAX_RULE = {
    "id": SYNTAX_CODE,
    "name": SYNTAX_NAME,
    "shortDescription": {"text": "A file pdguard reads does not parse."},
    "fullDescription": {
        "text": "A file pdguard needs does not parse (or cannot be decoded): no rule ran on "
        "its tree, so nothing about the tree is proven."
    },
    "help": {"text": "Fix the syntax error; pdguard then checks the tree."},
    "defaultConfiguration": {"level": "error"},
}


def sarif(results: Sequence[CheckResult], view: View = View()) -> str:
    rules: list[Mapping[str, object]] = []
    for rule in checks.RULES:
        title, body = rule.summary, rule.description
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": title},
                "fullDescription": {"text": body},
                "help": {"text": body},
                "helpUri": rule_url(rule.code),
                "defaultConfiguration": {"level": "error"},
            }
        )
    if any(r.errors for r in results):
        rules.append(SYNTAX_RULE)
    index = {str(rule["id"]): n for n, rule in enumerate(rules)}
    sarif_results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(path, result.absolute(f.path)),
                        "region": {"startLine": f.line, "startColumn": f.col},
                    },
                    **(
                        {"logicalLocations": [{"fullyQualifiedName": f.symbol, "kind": "function"}]}
                        if f.symbol
                        else {}
                    ),
                }
            ],
        }
        for result, path, f in _located(results)
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
                        "informationUri": HOMEPAGE,
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {
                    SRCROOT: {"uri": (workspace() or Path.cwd()).as_uri().rstrip("/") + "/"}
                },
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(log, indent=2)


def github(results: Sequence[CheckResult], view: View = View()) -> str:
    return "\n".join(
        annotation(result.annotation_rel(f.path), f) for result, _, f in _located(results)
    )


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}


# -- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="an SGLang tree (as for apply), a directory inside one, or files inside one (as "
        "pre-commit passes them); default: .",
    )
    add_installed(parser)
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
        "--fix",
        action="store_true",
        help="apply the fixes first (as `pdguard apply`; all or nothing), then check",
    )
    parser.add_argument(
        "--statistics",
        action="store_true",
        help="show the count of findings by rule instead of the findings (text or json)",
    )
    parser.add_argument(
        "--show-fixes",
        action="store_true",
        help="list what was fixed (with --fix), or what `pdguard apply` would fix (its plan, "
        "nothing written), by file and rule (text format)",
    )
    add_quiet(parser)
    config.add_arguments(parser)
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="also run `pdguard simulate`'s scenarios on the tree (text or json format)",
    )
    add_confirm(parser, default=False)
    cache.add_argument(parser)


def trees_of(args: argparse.Namespace) -> list[SourceTree]:
    """The trees ``check``'s arguments name (also what ``check --fix`` fixes first)."""
    if args.installed:
        if args.paths:
            raise UsageError("give PATHs or --installed, not both")
        return [installed_tree()]
    return trees_for(args.paths or ["."])


def could_fix(result: CheckResult, disabled: Iterable[str] = ()) -> list[Finding]:
    """The findings of ``result`` that a fix of ``pdguard apply`` (not disabled) may remove,
    told from the parsed files alone: of a code the fix writes code for (``Fix.fixes``). None
    where apply is bound to refuse (it is all or nothing): a finding of a code that proves a
    fix but that it does not fix (code pdguard cannot model, a hand-written deadline gone
    wrong), or a fix's own test (``Fix.fixable_in``) says it would refuse. A necessary
    condition (it never leaves out what apply fixes); it agrees with apply's plan on every
    pinned release, and ``--show-fixes`` plans (``would_fix``) to be sure."""
    from ..fixes import FIXES

    chosen = [fix for fix in FIXES if fix.name not in disabled]
    blocking = {code for fix in chosen for code in fix.rules if code not in fix.fixes}
    if any(f.code in blocking for f in result.findings):
        return []  # apply's re-check runs every fix's rules: that fix is refused, and so all
    found: list[Finding] = []
    for fix in chosen:
        mine = [f for f in result.findings if f.code in fix.fixes]
        if mine and not fix.fixable_in(result.project):
            return []
        found.extend(mine)
    return found


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
    if args.statistics and args.format not in ("text", "json"):
        raise UsageError("--statistics reports in --format text or json")
    if args.show_fixes and args.format != "text":
        raise UsageError("--show-fixes lists the fixes in --format text")
    trees = trees_of(args)
    first = None if args.installed else (args.paths or ["."])[0]
    settings = config.load(args, first)
    select, ignore = settings.rule_codes(args.select, args.ignore)
    codes = select_codes(select, ignore, args.confirm)
    # --fix: each tree's findings before `pdguard.cli` had apply write the fixes
    before: dict[str, list[Finding]] | None = getattr(args, "fixed", None)
    store = cache.ResultCache() if cache.enabled(args) else None
    results = []
    run_ = Run()  # the command's one run: every tree's parses and models are kept in it
    for tree in trees:
        try:
            results.append(
                cache.check_tree_cached(
                    tree,
                    codes,
                    store,
                    compute=lambda tree, codes: check_tree(tree, codes, run_),
                    load=lambda tree: load_project(tree, run_),
                    result=CheckResult,
                )
            )
        except ParseError as exc:
            results.append(syntax_result(tree, exc))
    for result in results:
        if result.errors:
            continue
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
    # "fixable": told from the parsed files (``could_fix``); with --show-fixes, apply's plan
    fixable = frozenset(
        (r.tree.label, f) for r in results for f in could_fix(r, settings.disabled_fixes)
    )
    fixed: dict[str, Counter[tuple[str, str]]] = {}
    listing: tuple[str, ...] = ()
    if before is not None:
        fixed = {r.tree.label: gone(before.get(r.tree.label, []), r.findings) for r in results}
        listing = fix_listing("Fixed", results, fixed)
    elif (
        args.show_fixes
    ):  # `pdguard.cli` hands over apply's ``would_fix`` (check never imports apply)
        would_fix: WouldFix = args.would_fix
        planned = {r.tree.label: would_fix(r, codes, settings.disabled_fixes) for r in results}
        would = {label: counts for label, (counts, _) in planned.items()}
        notes = [note for _, refusals in planned.values() for note in refusals]
        listing = fix_listing("Would fix", results, would, notes)
        fixable = frozenset(marked(results, would))
    view = View(
        statistics=args.statistics,
        quiet=args.quiet,
        fixable=fixable,
        fixed=sum(sum(c.values()) for c in fixed.values()),
        wrap=args.output_file is None and terminal.is_tty(sys.stdout),
        fixes=listing if args.show_fixes else (),
    )
    output = FORMATS[args.format](results, view)
    broken = [r for r in results if r.errors]
    if args.simulate and not broken:
        from ..simulate import run as simulate

        simulations = [simulate(tree) for tree in trees]
        failed = failed or not all(s.passed for s in simulations)
        output = SIMULATE_FORMATS[args.format](output, simulations)
    if args.format == "text" and args.output_file is None and terminal.colour(sys.stdout):
        output = coloured(output)
    emit(output, args.output_file)
    if broken:
        # the report holds the syntax errors; the one error line says the first, and exit 2
        first = broken[0].errors[0]
        reason = error_line(broken[0].display_path(first), first)
        print(f"pdguard: error: {reason}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_CHANGES if failed and not args.exit_zero else EXIT_OK


def gone(before: Sequence[Finding], after: Sequence[Finding]) -> Counter[tuple[str, str]]:
    """The findings of ``before`` that ``after`` no longer has, counted by (path, code): lines
    move when a fix is written, so findings are matched by file and rule."""
    return Counter((f.path, f.code) for f in before) - Counter((f.path, f.code) for f in after)


def marked(
    results: Sequence[CheckResult], counts: Mapping[str, Counter[tuple[str, str]]]
) -> set[Located]:
    """The findings ``counts`` (by tree label, then (path, code)) says are fixed: that many of
    each file's findings of the code."""
    found: set[Located] = set()
    for result in results:
        left = Counter(counts.get(result.tree.label, Counter()))
        for finding in result.findings:
            key = (finding.path, finding.code)
            if left[key] > 0:
                left[key] -= 1
                found.add((result.tree.label, finding))
    return found


def fix_listing(
    verb: str,
    results: Sequence[CheckResult],
    counts: Mapping[str, Counter[tuple[str, str]]],
    notes: Sequence[str] = (),
) -> tuple[str, ...]:
    """``--show-fixes``, as ruff's: ``Fixed 7 findings:`` (or ``Would fix``), then each file
    and, under it, each code's count, its rule and the fix that removes it; then the fixes
    apply would refuse. Nothing when there is nothing to list."""
    from ..fixes import FIXES

    names = _names()
    fix_of = {code: fix.name for fix in reversed(FIXES) for code in fix.fixes}
    total = sum(sum(c.values()) for c in counts.values())
    lines: list[str] = []
    if total:
        lines.append(f"{verb} {total} finding{'s' if total != 1 else ''}:")
        for result in results:
            by_path: dict[str, list[tuple[str, int]]] = {}
            for (rel, code), count in sorted(counts.get(result.tree.label, Counter()).items()):
                by_path.setdefault(result.display_rel(rel), []).append((code, count))
            for path, rows in by_path.items():
                lines.append(f"- {path}:")
                lines.extend(
                    f"    {count} x {code} ({names.get(code, code)}) by {fix_of.get(code, '?')}"
                    for code, count in rows
                )
    lines.extend(notes)
    return tuple(lines)


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
