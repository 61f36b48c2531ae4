"""The `mlflow` exporter against the real MLflow: a real `nel eval run` (reference server)
logs one run per bundle into a SQLite store under the output directory, read back with
`MlflowClient` (params, metrics at the checkpoint's step, artifacts); re-export updates the
same run; a tracking server that does not answer loses nothing and says how to export again,
which then works against a real `mlflow server` on 127.0.0.1; mlflow missing says what to
install."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.datasets import load_file
from nel_resources.runtime.processes import ManagedProcess, free_port
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for
from tests.support.waiting import PROCESS_START_S

N = 6
RIGHT = {0, 2, 3}
MODEL = "ckpt-step-3000"  # the model partition: a checkpoint saved at step 3000


@pytest.fixture
def gsm8k_config(tmp_path: Path, reference_server, data_dir: Path) -> tuple[Path, dict[str, str]]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, RIGHT))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  {MODEL}:\n    type: api\n    url: {url}\n    model: ref-model\n"
                   f"    generation:\n      temperature: 0.0\n      max_tokens: 64\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {N}\n    shuffle_seed: null\n"
                   f"output:\n  dir: {tmp_path / 'out'}\n  export: [mlflow]\n")
    return cfg, {"NEL_DATA_DIR": str(data_dir)}


def _bundle(out: Path) -> tuple[Path, dict]:
    (path,) = out.rglob("eval-*.json")  # one: the store's copy is not named like a bundle
    return path, json.loads(path.read_text())


def _check_run(client: MlflowClient, bundle: dict, tmp: Path) -> str:
    """The experiment `nel` holds exactly one run for the bundle, with what it should; its id."""
    exp = client.get_experiment_by_name("nel")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    run = runs[0]
    p, m = run.data.params, run.data.metrics
    assert p["model"] == "ref-model" and p["benchmark"] == "gsm8k" and p["nel.model"] == MODEL
    assert p["temperature"] == "0.0" and p["max_tokens"] == "64" and p["repeats"] == "1"
    assert p["config_hash"] == bundle["config_hash"] and p["nel_version"] == bundle["generator"]["version"]
    score = bundle["bundle"]["score"]
    assert m["score"] == pytest.approx(len(RIGHT) / N) == pytest.approx(score["mean"])
    assert m["score_ci_low"] == pytest.approx(score["ci_low"]) and m["score_ci_high"] == pytest.approx(score["ci_high"])
    assert m["score_ci_low"] < m["score"] < m["score_ci_high"]
    assert m["score_stderr"] == pytest.approx(score["se"]) and m["score_stderr"] > 0
    assert m["pass_at_1"] == pytest.approx(len(RIGHT) / N) and "pass_at_1_ci_high" in m
    assert m["n_items"] == N
    history = client.get_metric_history(run.info.run_id, "score")
    assert [h.step for h in history] == [3000], history  # the checkpoint's step, logged once
    assert run.data.tags["nel.step"] == "3000" and run.info.status == "FINISHED"
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert names == {"eval.json", "results.jsonl", "report"}, names
    assert [a.path for a in client.list_artifacts(run.info.run_id, "report")] == ["report/report.md"]
    got = Path(client.download_artifacts(run.info.run_id, "eval.json", str(tmp)))
    assert json.loads(got.read_text()) == bundle
    results = Path(client.download_artifacts(run.info.run_id, "results.jsonl", str(tmp)))
    assert len(results.read_text().splitlines()) == N
    return run.info.run_id


def test_run_export_then_re_export_updates_the_same_run(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    out = tmp_path / "out"
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=["MLFLOW_TRACKING_URI"])
    assert p.returncode == 0, p.stderr
    assert "mlflow export failed" not in p.stderr
    store = f"sqlite:///{out / 'mlflow' / 'mlflow.db'}"
    _, bundle = _bundle(out)
    client = MlflowClient(tracking_uri=store)
    run_id = _check_run(client, bundle, tmp_path / "dl1")
    assert (out / "mlflow" / "artifacts").is_dir()  # beside the database, not in the cwd

    # the same bundle again, from `nel export`: the same run, no second point in its history
    p = run_nel("export", str(out), "--dest", "mlflow", env=env, unset=["MLFLOW_TRACKING_URI"])
    assert p.returncode == 0, p.stderr
    assert f"-> run {run_id} (updated, step 3000)" in p.stderr, p.stderr
    assert _check_run(client, bundle, tmp_path / "dl2") == run_id

    # the run again (nothing to evaluate, the bundle rebuilt): still that one run
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=["MLFLOW_TRACKING_URI"])
    assert p.returncode == 0, p.stderr
    assert _check_run(client, _bundle(out)[1], tmp_path / "dl3") == run_id


def _start_mlflow_server(root: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess([str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
                           "--port", str(port), "--workers", "1",
                           "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
                           "--artifacts-destination", str(root / "server-artifacts")],
                          cwd=root, name="mlflow-server", log_path=root / "mlflow-server.log").start()
    url = f"http://127.0.0.1:{port}"
    proc.wait_healthy(f"{url}/health", timeout=PROCESS_START_S)
    return proc, url


def test_unreachable_tracking_server_keeps_the_results(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{free_port()}"  # a loopback port nothing listens on
    cfg.write_text(cfg.read_text() + f"  export_config:\n    mlflow:\n      tracking_uri: {dead}\n"
                   "      experiment_name: ckpts\n")
    t0 = time.monotonic()
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr  # the evaluation succeeded; only its export did not
    path, bundle = _bundle(out)
    assert (path.parent / "results.jsonl").is_file() and bundle["bundle"]["score"]["n_items"] == N
    failed = [ln for ln in p.stderr.splitlines() if "mlflow" in ln]
    again = f"nel export {out} --dest mlflow -o tracking_uri={dead} -o experiment_name=ckpts"
    assert len(failed) == 1 and failed[0].startswith(
        f"mlflow export failed: gsm8k/{MODEL} to {dead}: cannot reach the tracking server (Connection refused); "), p.stderr
    assert f"the results are kept in {out}; export them again with `{again}`" in failed[0]
    assert "Traceback" not in p.stderr
    print(f"nel eval run with an unreachable tracking server: {took:.1f} s")

    # `nel export` to the same dead server: exit 1, the same one line
    p = run_nel("export", str(out), "--dest", "mlflow", "-o", f"tracking_uri={dead}",
                "-o", "experiment_name=ckpts", env=env)
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0, p.stderr
    assert p.stderr.startswith("mlflow export failed: ") and again in p.stderr

    # the retry it suggests, against a real tracking server on 127.0.0.1
    proc, url = _start_mlflow_server(tmp_path)
    try:
        p = run_nel("export", str(out), "--dest", "mlflow", "-o", f"tracking_uri={url}",
                    "-o", "experiment_name=ckpts", env=env)
        assert p.returncode == 0, p.stderr
        client = MlflowClient(tracking_uri=url)
        (run,) = client.search_runs([client.get_experiment_by_name("ckpts").experiment_id])
        assert run.data.metrics["score"] == pytest.approx(len(RIGHT) / N)
        assert [h.step for h in client.get_metric_history(run.info.run_id, "score")] == [3000]
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"eval.json", "results.jsonl"}
        # once more: the server's run is updated, not duplicated
        assert run_nel("export", str(out), "--dest", "mlflow", "-o", f"tracking_uri={url}",
                       "-o", "experiment_name=ckpts", env=env).returncode == 0
        assert len(client.search_runs([run.info.experiment_id])) == 1
    finally:
        proc.stop()


def test_without_mlflow_installed_it_says_what_to_install(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    cfg.write_text(cfg.read_text().replace("  export: [mlflow]\n", ""))
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env).returncode == 0
    # an interpreter where `import mlflow` fails, as where the package is not installed
    blocker = tmp_path / "no_mlflow" / "mlflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mlflow'\", name='mlflow')\n")
    from tests.support.realcomponents import REPO_ROOT

    p = run_nel("export", str(tmp_path / "out"), "--dest", "mlflow",
                env={**env, "PYTHONPATH": f"{blocker.parent}:{REPO_ROOT}"})
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip() == (
        "mlflow export failed: the mlflow package is not installed (pip install 'nel[mlflow]'); "
        f"the results are kept in {tmp_path / 'out'}; export them again with "
        f"`nel export {tmp_path / 'out'} --dest mlflow`")


def test_bad_settings_are_one_line(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    p = run_nel("eval", "run", str(cfg), "--no-progress", "-O", "output.export_config.mlflow.tracking_urii=x",
                env=env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "key output.export_config.mlflow: mlflow exporter: unknown setting 'tracking_urii'" in p.stderr
    assert not (tmp_path / "out").exists()  # refused before any request


def test_emit_traces_logs_one_trace_per_sample_linked_to_the_run(gsm8k_config, tmp_path: Path) -> None:
    """NeMo Evaluator's `emit_traces: true` (walkthrough wt17): one MLflow trace per sample in
    the run's experiment, linked to the run, read back with MlflowClient; a re-export adds none."""
    cfg, env = gsm8k_config
    out = tmp_path / "out"
    cfg.write_text(cfg.read_text() + "  export_config:\n    mlflow:\n      emit_traces: true\n"
                   "      emit_traces_content_max: 40\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=["MLFLOW_TRACKING_URI"])
    assert p.returncode == 0 and "mlflow export failed" not in p.stderr, p.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("nel").experiment_id])
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, max_results=50)
    assert len(traces) == N
    results = [json.loads(line) for line in (_bundle(out)[0].parent / "results.jsonl").read_text().splitlines()]
    by_idx = {r["problem_idx"]: r for r in results}
    for t in traces:
        root = next(s for s in t.data.spans if s.parent_id is None)
        row = by_idx[root.attributes["nel.problem_idx"]]
        assert root.name == f"sample_{row['problem_idx']}" and root.span_type == "AGENT"
        assert root.attributes["nel.benchmark"] == "gsm8k" and root.attributes["nel.model"] == MODEL
        assert root.attributes["nel.reward"] == row["reward"]
        assert root.inputs["prompt"].startswith(row["prompt"][:40]) and "more characters]" in root.inputs["prompt"]
        (llm,) = [s for s in t.data.spans if s.parent_id == root.span_id]
        assert llm.span_type == "LLM" and llm.outputs["response"].startswith(row["model_response"][:40])
    assert sorted(by_idx[t.data.spans[0].attributes["nel.problem_idx"]]["reward"] for t in traces) == \
        sorted(r["reward"] for r in results)
    p = run_nel("export", str(out), "--dest", "mlflow", "-o", "emit_traces=true", env=env,
                unset=["MLFLOW_TRACKING_URI"])
    assert p.returncode == 0 and "(updated, its traces kept, step 3000)" in p.stderr, p.stderr
    assert len(client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, max_results=50)) == N
