"""``pdguard carry``: apply the fixes to the tree of a ref and commit the result on a new branch,
with git objects only (a private index file; HEAD, the index and the working tree are
untouched)."""

from __future__ import annotations

import argparse
import io
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import __version__
from ..errors import RefusedError, TargetError, UsageError
from ..run import Run
from .apply import ApplyResult, plan
from .base import EXIT_OK, installed_checkout

if TYPE_CHECKING:
    import git

NAME = "carry"
HELP = "commit the fixed tree of a ref as a new branch (git objects only)"
DESCRIPTION = (
    "Apply the fixes to the tree of --onto and commit it on a new branch (parent: that ref). "
    "The working tree, index and HEAD are not touched."
)


def epilog() -> str:
    return """\
The commit message lists each fix's status and the changed files, relative to the
repository root (python/sglang/srt/...). Only git objects and a private index are
used: HEAD, the index, the working tree and the checked-out branch stay as they are.

exit codes: 0 committed, or the ref already carries every fix (nothing committed);
2 error (not a git repo, unknown ref, an invalid branch name, an existing branch
without --force, a refused fix, a git command that fails).
"""


@dataclass
class CarryResult:
    plan: ApplyResult
    branch: str
    commit: str | None  # None: the ref already carries everything, nothing committed


def _message(result: ApplyResult, onto: str, prefix: str = "") -> str:
    lines = [f"Carry pdguard's PD-disaggregation liveness fix onto {onto}", ""]
    for name, outcome in result.outcomes.items():
        lines.append(
            f"- {name}: {outcome.status.value}" + (f" ({outcome.note})" if outcome.note else "")
        )
    lines += [
        "",
        f"Applied by pdguard {__version__}; files: "
        + ", ".join(prefix + rel for rel in sorted(result.changes)),
    ]
    return "\n".join(lines) + "\n"


def carry(repo_path: str, onto: str, branch: str, *, force: bool = False) -> CarryResult:
    import git

    from ..git_tree import open_git_tree, open_repo

    repo = open_repo(repo_path)
    check_branch_name(repo, branch)
    run = Run()  # the command's one run: the tree's git objects, the plan
    tree = open_git_tree(repo, onto, run=run)
    head_name = f"refs/heads/{branch}"
    exists = branch in repo.heads
    if exists and not force:
        raise TargetError(f"branch {branch} exists (use --force to move it)")
    if exists:
        try:
            where = _checked_out(repo).get(head_name)
        except git.GitCommandError as exc:  # an older git, a broken worktree list: refuse
            raise TargetError(
                f"branch {branch}: cannot tell whether a worktree has it checked out "
                f"(git worktree list failed); not moved"
            ) from exc
        if where is not None:  # as `git branch -f` refuses: that worktree would show reverts
            raise TargetError(
                f"branch {branch} is checked out at {where}; carry never moves a branch "
                "that a worktree has checked out"
            )
    old = repo.git.rev_parse("--verify", "--quiet", head_name) if exists else ""
    result = plan(tree, run=run)
    if result.refused:
        raise RefusedError(result.refusal())
    if not result.changes:
        return CarryResult(result, branch, None)

    from gitdb.base import IStream

    try:
        with tempfile.TemporaryDirectory(prefix="pdguard-carry-") as tmp:
            env = {**os.environ, **_identity(repo), "GIT_INDEX_FILE": os.path.join(tmp, "index")}
            repo.git.read_tree(tree.commit.hexsha, env=env)
            entries = []
            for rel, new in result.changes.items():
                path = tree.prefix + rel
                found = tree.entry(path)
                mode = found[0] if found is not None else 0o100644
                data = new.encode()
                stored = repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
                entries.append(f"{mode:o} {stored.hexsha.decode()}\t{path}\n")
            index_info = os.path.join(tmp, "index-info")
            with open(index_info, "w", encoding="utf-8") as handle:
                handle.writelines(entries)
            with open(index_info, "rb") as handle:
                repo.git.update_index("--index-info", istream=handle, env=env)
            new_tree = repo.git.write_tree(env=env)
            new_commit = repo.git.commit_tree(
                new_tree,
                "-p",
                tree.commit.hexsha,
                "-m",
                _message(result, onto, tree.prefix),
                env=env,
            )
        # with the value it had when checked: a branch moved meanwhile is not overwritten
        repo.git.update_ref(head_name, new_commit, old or "0" * 40)
    except git.GitCommandError as exc:  # no identity git accepts, a read-only repo, ...
        stderr = str(exc.stderr or "").strip().removeprefix("stderr: '").removesuffix("'")
        detail = stderr.splitlines()[-1] if stderr else f"exit status {exc.status}"
        raise TargetError(f"git {exc.command[1]} failed: {detail}") from exc
    except (OSError, ValueError, git.GitError) as exc:  # a git process that died (a broken pipe)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise TargetError(f"{onto}: writing the carried commit into git failed: {why}") from exc
    return CarryResult(result, branch, new_commit)


def _checked_out(repo: git.Repo) -> dict[str, str]:
    """The branches (``refs/heads/...``) that a worktree of ``repo`` has checked out, and where:
    ``git worktree list --porcelain`` (the main worktree and every linked one)."""
    checked: dict[str, str] = {}
    where = ""
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            where = line.removeprefix("worktree ")
        elif line.startswith("branch "):
            checked[line.removeprefix("branch ")] = where
    return checked


def check_branch_name(repo: git.Repo, branch: str) -> None:
    """Refuse a name git would refuse for a branch (``git check-ref-format --branch``), and the
    names it would take but mean something else: ``HEAD``, ``@`` (and any ``@{...}``, which git
    expands), a full ref (``refs/heads/x`` would become ``refs/heads/refs/heads/x``), and a name
    that starts with ``-``."""
    import git

    valid = bool(branch) and branch not in ("HEAD", "@") and not branch.startswith(("refs/", "-"))
    if valid:
        try:
            expanded = repo.git.check_ref_format("--branch", branch)
            repo.git.check_ref_format(f"refs/heads/{branch}")
            valid = expanded.strip() == branch  # `@{-1}`, `@` expand to another branch
        except git.GitCommandError:
            valid = False
    if not valid:
        raise UsageError(
            f"--branch {branch!r}: not a valid branch name (as `git check-ref-format --branch` "
            "judges it; HEAD, @ and refs/... are refused too)"
        )


def _identity(repo: git.Repo) -> dict[str, str]:
    import git

    """A committer for machines with no git identity configured (CI); a configured one wins.

    Each of user.name and user.email is asked of git itself (so HOME, includes and
    GIT_CONFIG_NOSYSTEM count as for the commit); only a missing one is filled in."""
    env: dict[str, str] = {}
    for key, fallback in (("name", "pdguard"), ("email", "pdguard@localhost")):
        try:
            repo.git.config("--get", f"user.{key}")
            continue
        except git.GitCommandError:  # exit 1: not set
            pass
        if key == "email" and "EMAIL" in os.environ:
            continue
        for who in ("AUTHOR", "COMMITTER"):
            if f"GIT_{who}_{key.upper()}" not in os.environ:
                env[f"GIT_{who}_{key.upper()}"] = fallback
    return env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--repo", metavar="PATH", help="the git repository holding SGLang")
    source.add_argument(
        "--installed",
        action="store_true",
        help="the git checkout the sglang this Python imports is installed from (pip install "
        "-e); an installed wheel has none",
    )
    parser.add_argument(
        "--onto",
        required=True,
        metavar="REF",
        help="the ref whose tree gets the fixes; the new commit's parent (e.g. v0.5.23)",
    )
    parser.add_argument(
        "--branch",
        required=True,
        metavar="NAME",
        help="the branch to create (a name git accepts for a branch, e.g. pdguard/v0.5.23)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="move the branch if it exists (never the checked-out one)",
    )


def text(done: CarryResult, onto: str) -> str:
    if done.commit is None:
        return f"{onto} already carries every fix: no commit"
    return f"{done.branch} -> {done.commit[:12]} (on {onto}): " + ", ".join(
        f"{n} {o.status.value}" for n, o in done.plan.outcomes.items()
    )


# carry prints one line: text is its only format (no --format option).
FORMATS = {"text": text}


def run(args: argparse.Namespace) -> int:
    repo = args.repo
    if args.installed:
        repo = str(
            installed_checkout("carry", "`pdguard apply --installed` patches it where it is")
        )
    done = carry(repo, args.onto, args.branch, force=args.force)
    print(FORMATS["text"](done, args.onto))
    return EXIT_OK
