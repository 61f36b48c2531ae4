"""The `container` solver end to end: `nel eval run` on a `container://image#task` benchmark
runs a harness image the module builds locally (tests/fixtures/harness_image: reads the run
config nel mounts, sends real requests to the reference server over the host network, writes
results.yml + eval_factory_metrics.json), and the bundle carries the harness's scores. A
missing image, a harness that exits non-zero and one that writes no results each end in one
clear line."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_assets.engine.solvers.container import HarnessRun, run_harness
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel, summary_json

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "harness_image"
# The reference server answers 3 of the harness's 4 questions right (3+3 gets 5).
ANSWERS = [{"match": "2+2", "content": "4"}, {"match": "3+3", "content": "5"},
           {"match": "5+5", "content": "10"}, {"match": "7+7", "content": "14"}]


@pytest.fixture(scope="module")
def harness_image(docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The harness image, built once (its tag is the hash of the fixture files)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(FIXTURE.iterdir()))).hexdigest()[:12]
    tag = f"nel-test-harness:{digest}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    ctx = tmp_path_factory.mktemp("harness_ctx")
    for p in FIXTURE.iterdir():
        shutil.copy(p, ctx / p.name)
    # the base image has no package index: the harness gets PyYAML's pure-Python package
    shutil.copytree(Path(yaml.__file__).parent, ctx / "yaml",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    proc, url = start_reference_server(answers=ANSWERS)
    try:
        yield url
    finally:
        proc.stop()


SECRET = "sk-harness-secret-4711"


def write_config(tmp_path: Path, url: str, name: str, params: dict[str, Any]) -> tuple[Path, Path]:
    out = tmp_path / "out"
    cfg = {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                             "protocol": "chat_completions", "model": "ref-model",
                             "api_key": SECRET}},
        "benchmarks": [{"name": name, "params": params,
                        "solver": {"type": "container", "service": "ref"}}],
        "output": {"dir": str(out)},
    }
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, out


def chat_requests(stats: Any, url: str) -> int:
    return stats(url)["by_endpoint"].get("/v1/chat/completions", 0)


def bundle_of(out: Path, task: str) -> dict[str, Any]:
    (path,) = list(out.glob(f"*_{task}/bundle/model=ref/bundle.json"))
    return json.loads(path.read_text())


def test_harness_scores_become_bundles_and_an_unchanged_rerun_runs_nothing(
        tmp_path: Path, harness_image: str, model_url: str, server_stats: Any) -> None:
    """One run, two harness tasks: `arith` writes per-sample rows (nel's score comes from
    them), `arith_lite` only task-level scores (the bundle's score is the harness's)."""
    name, lite = f"container://{harness_image}#arith", f"container://{harness_image}#arith_lite"
    cfg, out = write_config(tmp_path, model_url, name,
                            {"limit_samples": 4, "extra": {"write_samples": True}})
    doc = yaml.safe_load(cfg.read_text())
    doc["benchmarks"].append({**doc["benchmarks"][0], "name": lite, "params": {"limit_samples": 3}})
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = chat_requests(server_stats, model_url)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=300))
    # the harness's requests reached the model from inside the container
    assert chat_requests(server_stats, model_url) - before == 4 + 3
    res = {r["benchmark"]: r for r in s["results"]}
    assert set(res) == {name, lite} and not any(r["failed"] for r in res.values())
    bundle = bundle_of(out, "arith")
    harness = bundle["harness"]
    assert harness["scores"]["arith/exact_match/accuracy"]["value"] == pytest.approx(0.75)
    assert harness["response_stats"]["count"] == 4
    assert harness["run_config"]["target"]["api_endpoint"]["url"] == f"{model_url}/chat/completions"
    assert harness["run_config"]["config"]["params"]["limit_samples"] == 4
    # the key reached the harness as NEMO_API_KEY (it reads that variable, else fails), and
    # the run config names the variable only: the key is in no file nel wrote
    assert harness["run_config"]["target"]["api_endpoint"]["api_key_name"] == "NEMO_API_KEY"
    assert not [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    # per-sample rows the harness wrote are nel's rows: the score is computed from them
    assert bundle["score"]["mean"] == pytest.approx(0.75) and bundle["score"]["n_items"] == 4
    rows = [json.loads(x) for x in (Path(res[name]["exports"]) / "results.jsonl").read_text().splitlines()]
    assert sorted((r["problem_idx"], r["reward"]) for r in rows) == [(0, 1.0), (1, 0.0), (2, 1.0), (3, 1.0)]
    # task-level only: the harness's headline metric with its own standard error
    lite_bundle = bundle_of(out, "arith_lite")
    score = lite_bundle["score"]
    reported = lite_bundle["harness"]["scores"]["arith_lite/exact_match/accuracy"]
    assert score["source"] == "harness" and score["metric"] == "arith_lite/exact_match/accuracy"
    assert score["mean"] == pytest.approx(2 / 3) == reported["value"]
    assert score["se"] == pytest.approx(reported["stats"]["stderr"]) and score["n_items"] == 3
    assert 0.0 <= score["ci_low"] < score["mean"] < score["ci_high"] <= 1.0
    # an unchanged rerun runs nothing
    s2 = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=300))
    assert chat_requests(server_stats, model_url) - before == 7
    assert s2["shards_run"] == 0 and bundle_of(out, "arith")["score"] == bundle["score"]


def test_an_image_not_in_the_engine_is_refused_in_one_line(
        tmp_path: Path, docker_host: str, model_url: str, server_stats: Any) -> None:
    cfg, out = write_config(tmp_path, model_url, "container://nel-test-absent:never#arith", {})
    before = server_stats(model_url)["total_requests"]
    proc = run_nel("eval", "run", str(cfg), "--no-progress")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "not in the local Docker engine" in lines[0] and "docker pull" in lines[0]
    assert "docker load" in lines[0] and "Traceback" not in proc.stderr
    assert server_stats(model_url)["total_requests"] == before and not out.exists()


def test_a_failing_harness_fails_its_benchmark_with_the_reason(
        tmp_path: Path, harness_image: str, model_url: str) -> None:
    cfg, out = write_config(tmp_path, model_url, f"container://{harness_image}#exit_fail", {})
    proc = run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=240)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    (failure,) = json.loads(proc.stdout)["failed_benchmarks"].values()
    assert failure["reason"] == "the harness exited with status 3: harness: model endpoint refused the task"
    assert not list(out.glob("*/bundle/model=ref/bundle.json"))


def test_a_harness_that_writes_no_results_is_a_one_line_failure(harness_image: str, model_url: str) -> None:
    run = HarnessRun(image=harness_image, task="no_results", base_url=model_url, model_id="m")
    out = asyncio.run(run_harness(run))
    assert out.results is None and out.exit_code == 0
    assert out.error == "the harness wrote no results.yml (nor results.json) into /results"
    assert "harness: finished without results" in out.log_tail


def test_a_harness_past_its_timeout_is_stopped_and_its_container_removed(
        harness_image: str, model_url: str) -> None:
    run = HarnessRun(image=harness_image, task="hang", base_url=model_url, model_id="m", timeout=5)
    out = asyncio.run(run_harness(run))
    assert out.results is None and out.error == "the harness did not finish within 5 s (solver.run_timeout)"
    left = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"name=^{run.name}$"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []
