"""The `container` solver end to end: `nel eval run` on a `container://image#task` benchmark
runs a harness image the module builds locally (tests/fixtures/harness_image: reads the run
config nel mounts, sends real requests to the reference server over the host network, writes
results.yml + eval_factory_metrics.json), and the bundle carries the harness's scores. A
missing image, a harness that exits non-zero and one that writes no results each end in one
clear line."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def only_bundle(out: Path) -> dict[str, Any]:
    (path,) = list(out.glob("*/bundle/model=ref/bundle.json"))
    return json.loads(path.read_text())


def test_harness_with_per_sample_rows_gives_a_bundle_of_its_scores(
        tmp_path: Path, harness_image: str, model_url: str, server_stats: Any) -> None:
    name = f"container://{harness_image}#arith"
    cfg, out = write_config(tmp_path, model_url, name,
                            {"limit_samples": 4, "extra": {"write_samples": True}})
    before = chat_requests(server_stats, model_url)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=240))
    # the harness's requests reached the model from inside the container
    assert chat_requests(server_stats, model_url) - before == 4
    (res,) = s["results"]
    assert res["benchmark"] == name and res["failed"] == 0
    bundle = only_bundle(out)
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
    rows = [json.loads(x) for x in (Path(res["exports"]) / "results.jsonl").read_text().splitlines()]
    assert sorted((r["problem_idx"], r["reward"]) for r in rows) == [(0, 1.0), (1, 0.0), (2, 1.0), (3, 1.0)]
    # an unchanged rerun runs nothing
    s2 = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=240))
    assert chat_requests(server_stats, model_url) - before == 4
    assert s2["shards_run"] == 0 and only_bundle(out)["score"] == bundle["score"]


def test_task_level_harness_scores_become_the_bundle_score(
        tmp_path: Path, harness_image: str, model_url: str, server_stats: Any) -> None:
    name = f"container://{harness_image}#arith"
    cfg, out = write_config(tmp_path, model_url, name, {"limit_samples": 3})
    before = chat_requests(server_stats, model_url)
    summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=240))
    assert chat_requests(server_stats, model_url) - before == 3
    bundle = only_bundle(out)
    score, reported = bundle["score"], bundle["harness"]["scores"]["arith/exact_match/accuracy"]
    assert score["source"] == "harness" and score["metric"] == "arith/exact_match/accuracy"
    assert score["mean"] == pytest.approx(2 / 3) == reported["value"]
    assert score["se"] == pytest.approx(reported["stats"]["stderr"]) and score["n_items"] == 3
    assert 0.0 <= score["ci_low"] < score["mean"] < score["ci_high"] <= 1.0


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
    """One run, two harnesses: one exits 3, one exits 0 having written nothing."""
    cfg, out = write_config(tmp_path, model_url, f"container://{harness_image}#exit_fail", {})
    doc = yaml.safe_load(cfg.read_text())
    doc["benchmarks"].append({**doc["benchmarks"][0], "name": f"container://{harness_image}#no_results"})
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_nel("eval", "run", str(cfg), "--json", "--no-progress", timeout=240)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    failed = json.loads(proc.stdout)["failed_benchmarks"]
    reasons = {name.rsplit("#", 1)[1]: f["reason"] for name, f in failed.items()}
    assert "the harness exited with status 3: harness: model endpoint refused the task" in reasons["exit_fail"]
    assert "the harness wrote no results.yml" in reasons["no_results"]
    assert not list(out.glob("*/bundle/model=ref/bundle.json"))
