"""``examples/upstream-bump.yml``: every ``run:`` step of the workflow, run as GitHub Actions
would run it (``bash -e``, the step's ``env``, ``$GITHUB_OUTPUT``), against a local fork of a
local "upstream" repository of real SGLang releases. ``pdguard`` on PATH is the real command
(``python -m pdguard``), and every call is logged, so the test also proves that the workflow
ran the commands it shows. Only the ``uses:`` steps (checkout, setup-python, upload-sarif) and
the install step are not run; upload-sarif's input file is checked instead.

The fork: ``main`` is v0.5.14 with the fixes carried onto it (``pdguard carry``), the tags of
0.5.17, 0.5.18 and 0.5.23 are upstream only. The workflow must annotate the new tags, write a
SARIF file of the fork's own findings, and push the branch ``pdguard/v0.5.23``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import git, init_repo, pdguard, release_repo
from tests.paths import ROOT

pytestmark = pytest.mark.releases

WORKFLOW = ROOT / "examples" / "upstream-bump.yml"
OLD, NEW = "0.5.14", ("0.5.17", "0.5.18", "0.5.23")
EXPR = re.compile(r"\$\{\{\s*(?P<expr>[^}]*?)\s*\}\}")


def load_workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    # PyYAML reads the key `on` as True (YAML 1.1)
    assert set(data.get("on", data.get(True))) == {"schedule", "workflow_dispatch"}
    return data


def _evaluate(value: str, outputs: dict[str, dict[str, str]], inputs: dict[str, str]) -> str:
    """The few expressions the workflow uses: steps.<id>.outputs.<name> and inputs.<name>."""

    def one(match: re.Match[str]) -> str:
        expr = match.group("expr")
        step = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
        if step:
            return outputs.get(step.group(1), {}).get(step.group(2), "")
        given = re.fullmatch(r"inputs\.([\w-]+)", expr)
        assert given, f"the test does not evaluate {expr!r}"
        return inputs.get(given.group(1), "")

    return EXPR.sub(one, value)


def _outputs(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        found[name] = value
    return found


def _shim(bin_dir: Path, log: Path) -> None:
    """``pdguard`` on PATH: the real command of this checkout, each call logged."""
    bin_dir.mkdir()
    shim = bin_dir / "pdguard"
    shim.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {shlex.quote(str(log))}\n'
        f'exec {shlex.quote(sys.executable)} -m pdguard "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(upstream, fork): the fork's main is v0.5.14 with the fixes carried; it has no tags."""
    root = tmp_path_factory.mktemp("workflow")
    upstream = release_repo(root / "upstream", [OLD, *NEW])
    fork = root / "fork"
    subprocess.run(["git", "clone", "-q", str(upstream), str(fork)], check=True)
    init_repo(fork)  # identity and settings
    git(fork, "checkout", "-q", "-B", "main", f"v{OLD}")
    carried = pdguard("carry", "--repo", str(fork), "--onto", f"v{OLD}", "--branch", "fixed")
    assert carried.returncode == 0, carried.stderr
    git(fork, "reset", "-q", "--hard", "fixed")
    git(fork, "branch", "-q", "-D", "fixed")
    for tag in git(fork, "tag", "--list").split():
        git(fork, "tag", "-d", tag)
    git(fork, "remote", "remove", "origin")
    return upstream, fork


def run_workflow(
    fork: Path, upstream: Path, tmp_path: Path, inputs: dict[str, str]
) -> dict[str, object]:
    """Every run: step of the workflow in a fresh CI checkout of ``fork`` (origin = fork)."""
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", "--no-tags", str(fork), str(checkout)], check=True)
    init_repo(checkout)
    log = tmp_path / "pdguard-calls.log"
    _shim(tmp_path / "bin", log)
    workflow = load_workflow()
    [job] = workflow["jobs"].values()
    outputs: dict[str, dict[str, str]] = {}
    logs: dict[str, subprocess.CompletedProcess[str]] = {}
    sarif_files = []
    for n, step in enumerate(job["steps"]):
        if "uses" in step:
            if step["uses"].startswith("github/codeql-action/upload-sarif"):
                sarif_files.append(checkout / step["with"]["sarif_file"])
            continue
        if step.get("name") == "Install pdguard":
            continue  # the test runs this checkout's pdguard (the shim)
        github_output = tmp_path / f"output-{n}"
        github_output.write_text("")
        env = {
            **os.environ,
            **{k: str(v) for k, v in workflow.get("env", {}).items()},
            "UPSTREAM": str(upstream),
            "GITHUB_OUTPUT": str(github_output),
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        }
        for key, value in step.get("env", {}).items():
            env[key] = _evaluate(str(value), outputs, inputs)
        script = _evaluate(step["run"], outputs, inputs)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (step.get("name"), done.stdout, done.stderr)
        logs[step.get("name", f"step {n}")] = done
        if "id" in step:
            outputs[step["id"]] = _outputs(github_output)
    calls = log.read_text().splitlines() if log.exists() else []
    return {"outputs": outputs, "logs": logs, "sarif": sarif_files, "calls": calls}


def test_the_workflow_runs_on_a_fork_of_real_releases(fork, tmp_path: Path) -> None:
    upstream, fork_path = fork
    ran = run_workflow(fork_path, upstream, tmp_path, inputs={})  # as on a schedule
    outputs = ran["outputs"]
    new_tags = [f"v{v}" for v in NEW]
    assert outputs["new"]["refs"].split() == [a for t in new_tags for a in ("--ref", t)]
    assert outputs["new"]["newest"] == new_tags[-1]
    assert outputs["verify"]["status"] == "1"  # the new releases need the fix

    # the same pdguard commands the workflow shows, each run once
    assert [call.split()[0] for call in ran["calls"]] == ["verify", "check", "carry"]
    assert "--format github" in ran["calls"][0]

    annotations = ran["logs"]["pdguard verify (annotations)"].stdout.splitlines()
    assert annotations and all(line.startswith(("::warning ", "::error ")) for line in annotations)
    for tag in new_tags:
        assert any(f"title=pdguard verify {tag}::" in line for line in annotations), tag
    assert not any(f"v{OLD}" in line for line in annotations)  # merged: not new

    [sarif_file] = ran["sarif"]
    log = json.loads(sarif_file.read_text())
    [sarif_run] = log["runs"]
    assert sarif_run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/checkout/")
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif_run["results"]
    }
    prefill_codes = {"PDG001", "PDG002", "PDG003", "PDG004", "PDG005", "PDG008"}
    assert not {r["ruleId"] for r in sarif_run["results"]} & prefill_codes  # the fork is fixed
    assert all(uri.startswith("python/sglang/srt/disaggregation/") for uri in uris), uris

    branch = f"pdguard/{new_tags[-1]}"
    pushed = git(fork_path, "rev-parse", "--verify", f"refs/heads/{branch}")
    assert git(fork_path, "rev-parse", f"{pushed}^") == git(
        upstream, "rev-parse", f"{new_tags[-1]}^{{commit}}"
    )
    verified = pdguard("verify", "--repo", str(fork_path), "--ref", branch, "--format", "json")
    assert json.loads(verified.stdout)[0]["fixes"] == {
        "sender-abort": "upstream",  # 0.5.13+ senders honour abort() upstream
        "inflight-deadline": "carried",
        "sender-bootstrap-timeout": "upstream",
        "receiver-waiting-timeout": "upstream",  # 0.5.6+ receivers have it upstream
        "decode-queue-bound": "carried",
    }

    # run again: the branch exists, nothing is pushed twice, the job still passes
    again = run_workflow(fork_path, upstream, tmp_path / "again", inputs={"carry": "true"})
    assert "exists already" in again["logs"]["pdguard carry (optional)"].stdout
    assert [call.split()[0] for call in again["calls"]] == ["verify", "check"]


def test_dispatch_without_carry_and_with_a_tag_pattern(fork, tmp_path: Path) -> None:
    upstream, fork_path = fork
    ran = run_workflow(fork_path, upstream, tmp_path, inputs={"tags": "v0.5.17", "carry": "false"})
    assert ran["outputs"]["new"]["refs"].split() == ["--ref", "v0.5.17"]
    assert [call.split()[0] for call in ran["calls"]] == ["verify", "check"]
    assert "nothing to carry" in ran["logs"]["pdguard carry (optional)"].stdout
