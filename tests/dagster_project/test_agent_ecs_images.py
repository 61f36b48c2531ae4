"""Harbor tasks in an `ecs_fargate` sandbox, as `nel eval run` checks them before any request:
the dry run plans them and lists the task images the run would build by CodeBuild (their
ECR tags); a block that cannot build a task that must be built is refused in one line.

No AWS request is made here (AWS_ENDPOINT_URL points at a closed loopback port): the builds
and the Fargate tasks themselves are tested against moto's server in
tests/nel_resources/sandboxes/test_ecr_build.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_project.cli.main import main
from nel_resources.sandboxes.ecr_build import task_image_tag
from tests.support.harbor_tasks import write_task_set

REPO = "123456789012.dkr.ecr.us-east-1.amazonaws.com/harbor-tasks"
BLOCK = {"type": "ecs_fargate", "region": "us-east-1", "cluster": "harbor",
         "subnets": ["subnet-1"], "execution_role_arn": "arn:aws:iam::123456789012:role/exec",
         "ssh_sidecar": {"public_key_secret_arn": "arn:pub", "private_key_secret_arn": "arn:priv"},
         "ecr_repository": REPO, "s3_bucket": "nel-builds",
         "codebuild_service_role": "arn:aws:iam::123456789012:role/cb"}


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two tasks: `a-build` must be built (RUN, no prebuilt image), `b-ready` names its image."""
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(k, v)
    root = write_task_set(tmp_path / "tasks", {
        "a-build": {"instruction": "x", "file": "x.txt", "expected": "x\n"},
        "b-ready": {"instruction": "y", "file": "y.txt", "expected": "y\n"}},
        "python:3.12-slim", agent_timeout=60)
    toml = root / "a-build" / "task.toml"
    toml.write_text(toml.read_text().replace('docker_image = "python:3.12-slim"\n', ""))
    (root / "a-build" / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim\nWORKDIR /app\nRUN pip install attrs\n")
    return root


def _config(tmp_path: Path, tasks: Path, **block: Any) -> Path:
    cfg = {"services": {"ref": {"type": "api", "url": "http://127.0.0.1:9/v1/chat/completions",
                                "protocol": "chat_completions", "model": "ref"}},
           "benchmarks": [{"name": "terminal-bench-v1", "params": {"tasks_dir": str(tasks)},
                           "solver": {"type": "tool_calling", "service": "ref",
                                      "sandbox_tools": True},
                           "sandbox": {k: v for k, v in {**BLOCK, **block}.items()
                                       if v is not None}}]}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_the_dry_run_lists_the_images_it_would_build(tmp_path: Path, tasks: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["eval", "run", str(_config(tmp_path, tasks)), "--dry-run", "--json",
               "-o", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    plan = json.loads(captured.out)
    assert plan["would_run"] >= 1 and not plan["errors"], plan
    tag = task_image_tag(tasks / "a-build" / "environment")
    (check,) = [c for c in plan["deferred_checks"] if "CodeBuild" in c]
    # only the task that must be built; the other runs its own image
    assert check.startswith("checked at run time (needs AWS): 'terminal-bench-v1': builds 1 "
                            f"task image(s) ({tag}) by CodeBuild into {REPO}"), check
    assert "b-ready" not in check and not (tmp_path / "out").exists()


def test_a_block_that_cannot_build_is_refused_in_one_line(
        tmp_path: Path, tasks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, tasks, ecr_repository=None, s3_bucket=None,
                   codebuild_service_role=None)
    for dry in ([], ["--dry-run"]):  # one resolution path: the dry run refuses it too
        rc = main(["eval", "run", str(path), *dry, "-o", str(tmp_path / "out")])
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"error: {path}:")
        assert ("key benchmarks.0.sandbox: 'terminal-bench-v1': tasks a-build have build steps "
                "in their environment/Dockerfile: set the ecs_fargate block's `ecr_repository`"
                ) in lines[0], lines[0]
    # a block that leaves out `s3_bucket` is refused on `ecr_repository`, before any request
    rc = main(["eval", "run", str(_config(tmp_path, tasks, s3_bucket=None)),
               "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "key benchmarks.0.sandbox.ecr_repository: " in err and "`s3_bucket`" in err
