"""HumanEval end to end: `nel eval run` with a `local` sandbox named under `sandboxes:` (the
NeMo Evaluator config shape), the asset graph materialized in Dagster with a `docker`
sandbox, and the refusal of a run that has no sandbox. The model is the reference server,
answering from the canonical solutions (and a few wrong answers) in the shapes models use."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.builtin.humaneval import HumanEval
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE

N = 6
REPEATS = 2


def answers(env: HumanEval) -> list[dict[str, str]]:
    """Per problem: 0-2 the gold function fenced, 3 the gold body bare after a `<think>`
    block, 4 a wrong function (HumanEval/4 returns a float), 5 a function that never returns."""
    out = []
    for i in range(N):
        row = env.rows[i]
        ep = row["entry_point"]
        content = env.gold_response(asyncio.run(env.seed(i)))
        if i == 3:
            content = ("<think>I should loop over the input.\n```python\ndef " + ep
                       + "(*a):\n    return None\n```</think>\n" + row["canonical_solution"])
        elif i == 4:
            content = f"Here it is:\n```python\ndef {ep}(numbers):\n    return -1.0\n```"
        elif i == 5:
            content = f"```python\ndef {ep}(*args):\n    while True:\n        pass\n```"
        # the docstring is in the prompt and unique to the problem
        out.append({"match": row["prompt"].strip()[-200:], "content": content})
    return out


@pytest.fixture(scope="module")
def model_url(humaneval: HumanEval) -> Iterator[str]:
    """One reference server for the module."""
    proc, url = start_reference_server(answers=answers(humaneval))
    try:
        yield url
    finally:
        proc.stop()


def config(url: str, out: Path, sandbox: Any, *, named: bool = False,
           repeats: int = REPEATS) -> dict[str, Any]:
    bench: dict[str, Any] = {
        "name": "humaneval", "max_problems": N, "repeats": repeats,
        "solver": {"type": "simple", "service": "ref"},
        # a short limit for the program that never returns
        "params": {"exec_timeout": 3},
    }
    cfg: dict[str, Any] = {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                               "protocol": "chat_completions", "model": "ref", "max_concurrent": 8}},
        "benchmarks": [bench], "output": {"dir": str(out)},
    }
    if named:
        cfg["sandboxes"] = {"code": sandbox}
        bench["sandbox"] = "code"
    elif sandbox is not None:
        bench["sandbox"] = sandbox
    return cfg


def write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def check_rows(rows: list[dict[str, Any]]) -> None:
    """The verdicts the answers above must get, every repeat."""
    by = {(r["problem_idx"], r["repeat"]): r for r in rows}
    assert sorted(by) == [(i, k) for i in range(N) for k in range(REPEATS)]
    for (i, _), r in by.items():
        d = r["scoring_details"]
        want = "assertion" if i == 4 else "timeout" if i == 5 else "passed"
        assert d["reason"] == want, (i, d)
        assert r["reward"] == (1.0 if want == "passed" else 0.0)
    assert by[(3, 0)]["scoring_details"]["method"] == "body"
    assert by[(3, 0)]["scoring_details"]["source"] == "content"  # the <think> decoy is ignored
    assert by[(0, 0)]["scoring_details"]["method"] == "fence_entry_point"
    assert by[(5, 0)]["scoring_details"]["stopped"] == "timeout"


def check_bundle(bundle: dict[str, Any]) -> None:
    s = bundle["score"]
    assert s["n_items"] == N and s["n_samples"] == N * REPEATS and s["n_repeats"] == REPEATS
    assert s["mean"] == pytest.approx(4 / 6)
    assert set(s["pass_at_k"]) == {"1", "2"}
    for k in ("1", "2"):
        assert s["pass_at_k"][k]["mean"] == pytest.approx(4 / 6)
        assert s["pass_at_k"][k]["n_items"] == N


def test_nel_eval_run_with_a_named_local_sandbox(tmp_path: Path, model_url: str, bwrap: None,
                                                  server_stats, data_dir: Path) -> None:
    out = tmp_path / "out"
    cfg = write(tmp_path, config(model_url, out, {"type": "local", "concurrency": 2}, named=True))
    before = server_stats(model_url)["by_endpoint"].get("/v1/chat/completions", 0)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                             env={"NEL_DATA_DIR": str(data_dir)}))
    (res,) = s["results"]
    assert res["benchmark"] == "humaneval" and res["n_items"] == N and res["failed"] == 0
    sent = server_stats(model_url)["by_endpoint"].get("/v1/chat/completions", 0) - before
    assert sent == N * REPEATS
    traj = [json.loads(x) for x in (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines()]
    check_rows(traj)
    bundle = json.loads((out / "humaneval" / "bundle" / "model=ref" / "bundle.json").read_text())
    check_bundle(bundle)


@pytest.mark.parametrize("sandbox", [None, {"type": "none"}], ids=["absent", "none"])
def test_a_run_without_a_sandbox_is_refused_before_any_request(
        tmp_path: Path, model_url: str, server_stats, sandbox: Any, data_dir: Path) -> None:
    out = tmp_path / "out"
    cfg = write(tmp_path, config(model_url, out, sandbox))
    before = server_stats(model_url)["total_requests"]
    proc = run_nel("eval", "run", str(cfg), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "'humaneval'" in lines[0] and "needs a sandbox" in lines[0]
    assert "`sandbox: {type: local}`" in lines[0] and "docker" in lines[0]
    assert "Traceback" not in proc.stderr
    assert server_stats(model_url)["total_requests"] == before
    assert not out.exists()


def test_dagster_graph_with_a_docker_sandbox(tmp_path: Path, model_url: str, docker_host: str,
                                             data_dir: Path) -> None:
    import dagster as dg

    from nel_assets.factory import build_defs, build_resources
    from nel_resources.config import load_config
    from nel_resources.resources import SandboxResource
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    out = tmp_path / "out"
    sandbox = {"type": "docker", "image": BASE_IMAGE, "concurrency": 2,
               "container_env": {"NEL_TEST_SECRET": "kept-out-of-dagster"}}
    cfg = resolve(load_config(write(tmp_path, config(model_url, out, sandbox))))
    defs = build_defs(cfg, str(out))
    res = build_resources(cfg, str(out))
    sb = res["sandbox_humaneval"]
    assert isinstance(sb, SandboxResource)
    assert "kept-out-of-dagster" not in sb.sandbox_json  # container_env stays out of Dagster config
    assert sb.sandbox().container_env == {"NEL_TEST_SECRET": "kept-out-of-dagster"}
    assets = [*defs.assets, *defs.asset_checks]  # type: ignore[list-item]
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("model", ["ref"])
        shards = dg.materialize(assets, instance=instance, resources=res,
                                partition_key=dg.MultiPartitionKey({"model": "ref", "shard": "0"}),
                                selection=[dg.AssetKey(["humaneval", "shard_results"])])
        assert shards.success
        (mat,) = shards.get_asset_materialization_events()
        md = mat.materialization.metadata
        assert md["n_rows"].value == N * REPEATS and md["n_errors"].value == 0
        bundle = dg.materialize(assets, instance=instance, resources=res, partition_key="ref",
                                selection=[dg.AssetKey(["humaneval", "bundle"])])
        assert bundle.success
    traj = ResultStore(out).export_dir("humaneval", "ref") / "trajectories.jsonl"
    check_rows([json.loads(x) for x in traj.read_text().splitlines()])
    check_bundle(json.loads((out / "humaneval" / "bundle" / "model=ref" / "bundle.json").read_text()))
    assert os.environ.get("NEL_TEST_SECRET") is None


# A benchmark file written for NeMo Evaluator: its scorer calls `code_sandbox(sample)` on rows
# carrying `_prompt`, `_test` and `_entry_point` (the layout of NeMo Evaluator's own HumanEval).
BYOB = '''
from nemo_evaluator.environments.custom import benchmark, scorer
from nemo_evaluator.scoring import ScorerInput, code_sandbox


def _prepare(row, idx, rng):
    return {**row, "_prompt": row["prompt"], "_test": row["test"], "_entry_point": row["entry_point"]}


@benchmark(name="humaneval_byob", dataset="rows.jsonl", target_field="entry_point",
           prompt="Implement this function:\\n\\n{prompt}", prepare_row=_prepare)
@scorer
def code_scorer(sample: ScorerInput) -> dict:
    return code_sandbox(sample)
'''


def test_a_nemo_evaluator_benchmark_file_scores_in_the_configured_sandbox(
        tmp_path: Path, humaneval: HumanEval, model_url: str, bwrap: None, data_dir: Path) -> None:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(humaneval.rows[i]) + "\n" for i in (0, 4)))
    bench = tmp_path / "he_byob.py"
    bench.write_text(BYOB)
    out = tmp_path / "out"
    cfg = config(model_url, out, {"type": "local"}, repeats=1)
    cfg["benchmarks"][0].update(name="humaneval_byob", module=str(bench), params={})
    s = summary_json(run_nel("eval", "run", str(write(tmp_path, cfg)), "--json", "--no-progress",
                             env={"NEL_DATA_DIR": str(data_dir)}))
    (res,) = s["results"]
    traj = [json.loads(x) for x in (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines()]
    # problem 0 answered with its gold function, problem 4 with a wrong one
    assert [t["reward"] for t in traj] == [1.0, 0.0]
    assert [t["scoring_details"]["reason"] for t in traj] == ["passed", "assertion"]


def test_a_sandbox_that_cannot_start_fails_before_any_request(
        tmp_path: Path, model_url: str, docker_host: str, server_stats) -> None:
    """The shard itself, in this process (the CLI's handling of a failed pair is tested
    elsewhere): it fails in one line before its first model request."""
    from benchmarks.errors import NelError
    from nel_assets.engine.evaluation.evaluate import evaluate_shard
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    out = tmp_path / "out"
    sandbox = {"type": "docker", "image": "nel-test-no-such-image:1"}
    (run,) = resolve(load_config(write(tmp_path, config(model_url, out, sandbox)))).benchmarks[0].runs
    before = server_stats(model_url)["total_requests"]
    with pytest.raises(NelError) as err:
        evaluate_shard(run, ResultStore(out), 0)
    msg = str(err.value)
    assert msg.startswith("benchmark 'humaneval': its docker sandbox cannot run: ") and "\n" not in msg
    assert "nel-test-no-such-image:1" in msg
    assert server_stats(model_url)["total_requests"] == before  # not one answer paid for
