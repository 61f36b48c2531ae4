"""`nel eval run --dry-run` plans NeMo Evaluator's configs without what only the run needs
(a Harbor task cache, a Docker engine, AWS, an agent CLI): it lists each such check instead,
in text and `--json`, while the run itself (same checks, same path) still refuses in one line.
A `cluster.type: slurm` dry run writes the sbatch scripts and submits nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_project.cli.main import main

NEMO = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nemo_configs"


def _nel(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _refusal(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0].removeprefix("error: ")


def _plan_then_run(config: Path, out: Path, capsys: pytest.CaptureFixture[str],
                   *extra: str) -> tuple[dict, str, str]:
    """(the --json plan, its text form, the one line the run refuses with)."""
    code, text, err = _nel(capsys, "eval", "run", str(config), "--dry-run", "-o", str(out), *extra)
    assert code == 0, err
    code, js, err = _nel(capsys, "eval", "run", str(config), "--dry-run", "--json", "-o", str(out),
                         *extra)
    assert code == 0, err
    plan = json.loads(js)
    code, _, err = _nel(capsys, "eval", "run", str(config), "-o", str(out), *extra)
    assert code == 2, err  # nothing ran, no request was sent
    assert "Traceback" not in err
    return plan, text, _refusal(err)


def test_a_harbor_dataset_not_here_is_planned_and_the_run_refuses_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """(and the Harbor CLI the solver names is not here either)"""
    monkeypatch.setenv("HARBOR_DATASETS_DIR", str(tmp_path / "no-cache"))
    plan, text, refused = _plan_then_run(NEMO / "examples" / "08a_terminalbench_harbor_docker.yaml",
                                         tmp_path / "o", capsys,  # no Harbor CLI there either
                                         "-O", f"benchmarks.0.solver.harbor_bin={tmp_path}/harbor")
    checks = plan["deferred_checks"]
    assert any("needs the data here" in c and "no-cache/terminal-bench@2.0" in c for c in checks)
    assert any("needs the program installed" in c and f"`{tmp_path}/harbor`" in c for c in checks)
    # The run refuses with the first of the checks the plan listed, word for word.
    assert any(c.endswith(refused) for c in checks), (refused, checks)
    assert plan["benchmarks"][0]["problems"] is None and plan["would_run"] == 1
    assert "problems unknown until its data is here" in text
    assert "checked at run time (needs the data here)" in text
    assert not (tmp_path / "o").exists()  # a dry run writes nothing


def test_a_container_benchmark_plans_without_a_docker_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    plan, _, refused = _plan_then_run(NEMO / "walkthrough" / "wt16_container_uri.yaml",
                                      tmp_path / "o", capsys)
    assert plan["deferred_checks"] == [
        "checked at run time (needs the Docker engine and its images): image "
        "'nvcr.io/nvidia/eval-factory/nemo-skills:26.03' is in the local Docker engine (nel "
        "never pulls)"]
    assert "the Docker engine cannot be asked about image" in refused


def test_an_ecs_sandbox_plans_without_aws_and_the_run_needs_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws
    config = tmp_path / "ecs.yaml"
    config.write_text(
        "services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', model: m,\n"
        "      protocol: chat_completions}\n"
        "benchmarks:\n- name: humaneval\n  max_problems: 2\n  solver: {type: simple, service: m}\n"
        "  sandbox:\n    type: ecs_fargate\n    region: us-west-2\n    cluster: c\n"
        "    subnets: [subnet-1]\n    execution_role_arn: arn:aws:iam::1:role/x\n"
        "    ssh_sidecar: {public_key_secret_arn: arn:pub, private_key_secret_arn: arn:priv}\n")
    plan, _, refused = _plan_then_run(config, tmp_path / "o", capsys)
    assert [c for c in plan["deferred_checks"] if "needs AWS" in c] == [
        f"checked at run time (needs AWS): {refused}"]
    assert "no AWS credentials here" in refused and plan["would_run"] == 1


def test_a_slurm_dry_run_writes_the_scripts_and_submits_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    code, js, err = _nel(capsys, "eval", "run",
                         str(NEMO / "examples" / "15a_slurm_gsm8k_vllm_sharded.yaml"),
                         "--dry-run", "--json", "-o", str(out))
    assert code == 0, err
    plan = json.loads(js)
    (run_dir,) = (out / "slurm").iterdir()
    eval_script = (run_dir / "eval.sbatch").read_text()
    assert plan["written"][0].startswith(f"wrote {run_dir / 'eval.sbatch'} (4 tasks in 1 array")
    assert plan["written"][-1] == (f"to submit: sbatch --array=0-3 {run_dir / 'eval.sbatch'} "
                                   f"{run_dir / 'partitions-0.json'}")
    # The jobs run the real command: the same config and flags, without --dry-run.
    assert "--slurm-task" in eval_script and "--dry-run" not in eval_script
    assert "#SBATCH --gres=gpu:4" in eval_script
    assert len(json.loads((run_dir / "partitions-0.json").read_text())) == 4
    assert (run_dir / "merge.sbatch").is_file()
    assert not (run_dir / "jobs.json").exists()  # written only once a job is submitted
    assert sorted(p.name for p in out.iterdir()) == ["slurm"]  # no store, no Dagster home
