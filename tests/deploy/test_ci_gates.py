"""The CI regression gates in deploy/ci: the GitLab file has NeMo Evaluator's three jobs
(eval:baseline, eval:candidate, regression:check), the GitHub workflow the same three running
the same command lines, and those lines are executed here, job by job as the CI runner would
(its variables, a shell per line), against the reference server: the baseline through
`nel eval run`, the candidate through `dagster job execute`, then `nel compare` and `nel gate`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT

CI = REPO_ROOT / "deploy" / "ci"
GITLAB_JOBS = ("eval:baseline", "eval:candidate", "regression:check")
GITHUB_JOBS = dict(zip(("eval-baseline", "eval-candidate", "regression-check"), GITLAB_JOBS, strict=True))
_VAR = re.compile(r"\$(\{(\w+)\}|(\w+))")


def _gitlab() -> dict[str, Any]:
    return yaml.safe_load((CI / "gitlab-ci.yml").read_text())


def _github() -> dict[str, Any]:
    return yaml.safe_load((CI / "github-actions.yml").read_text())


def _expand(value: str, env: dict[str, str]) -> str:
    """GitLab's expansion of `$VAR` / `${VAR}` in `variables:` values."""
    return _VAR.sub(lambda m: env.get(m.group(2) or m.group(3), ""), value)


def test_both_files_have_the_three_jobs_with_the_same_commands() -> None:
    gl, gh = _gitlab(), _github()
    assert gl["stages"] == ["evaluate", "regression"]
    for job in GITLAB_JOBS:
        assert job in gl and gl[job]["script"], job
    assert set(gl["regression:check"]["needs"]) == {"eval:baseline", "eval:candidate"}
    assert gl["eval:baseline"]["stage"] == gl["eval:candidate"]["stage"] == "evaluate"
    # `on:` is read by YAML 1.1 as True
    assert set(gh[True]) >= {"pull_request"} and set(gh["jobs"]) == set(GITHUB_JOBS)
    assert set(gh["jobs"]["regression-check"]["needs"]) == {"eval-baseline", "eval-candidate"}
    for gh_job, gl_job in GITHUB_JOBS.items():
        runs = [s["run"] for s in gh["jobs"][gh_job]["steps"] if "run" in s]
        nel_lines = [r for r in runs if r.startswith(("nel ", "dagster ", "mkdir ", "if "))]
        assert nel_lines == gl[gl_job]["script"], gh_job
    assert any("dagster job execute" in line for line in gl["eval:candidate"]["script"])
    assert any(line.startswith("nel gate ") for line in gl["regression:check"]["script"])
    for name in ("NEL_EVAL_CONFIG", "NEL_GATE_POLICY"):
        assert (REPO_ROOT / gl["variables"][name]).is_file()
        assert gh["env"][name] == gl["variables"][name]


def _run_job(gl: dict[str, Any], job: str, base: dict[str, str], log: list[str]) -> None:
    env = dict(base)
    for scope in (gl["variables"], gl[job].get("variables", {})):
        for key, value in scope.items():
            env[key] = _expand(str(value), env)
    for line in gl[job]["script"]:
        proc = subprocess.run(["sh", "-c", line], env=env, cwd=base["CI_PROJECT_DIR"], capture_output=True,
                              text=True, timeout=600)
        log.append(f"$ {line}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        assert proc.returncode == 0, "\n".join(log)


@pytest.mark.slow
def test_the_gitlab_jobs_run_against_the_reference_server(tmp_path: Path, reference_server, data_dir: Path) -> None:
    url = reference_server()
    project = tmp_path / "project"  # a checkout: the CI files' relative paths resolve here
    project.mkdir()
    (project / "deploy").symlink_to(REPO_ROOT / "deploy")
    base = nel_env({"CI_PROJECT_DIR": str(project), "NEL_DATA_DIR": str(data_dir), "NEL_MAX_PROBLEMS": "12",
                    "NEL_SHARDS": "2", "BASELINE_MODEL_URL": url, "BASELINE_MODEL_ID": "released",
                    "CANDIDATE_MODEL_URL": url, "CANDIDATE_MODEL_ID": "candidate"},
                   unset=["NEL_DAGSTER_POSTGRES_URL"])
    # `nel` and `dagster` as the CI image has them after `pip install`: this venv's scripts
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}"
    # 12 problems: `nel gate` needs 10 paired items for a verdict (NeMo Evaluator's minimum;
    # fewer is INCONCLUSIVE, which fails the job)
    gl, log = _gitlab(), []
    for job in GITLAB_JOBS:
        _run_job(gl, job, base, log)
    results = project / "eval_results"
    for side in ("baseline", "candidate"):
        assert list((results / side / "gsm8k" / "shard_results").glob("model=model/shard=*/*.parquet")), side
    regression = results / "regression" / "regression.json"
    assert regression.is_file() and "gate" in regression.read_text()
    # the candidate's runs went through Dagster: its job run is in the job's own instance
    assert any((project / ".dagster-ci").iterdir())
