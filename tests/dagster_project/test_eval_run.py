"""`nel eval run` end to end against the reference server: Parquet store, bundle, seed-
compatible files, DuckDB, stale-only reruns, crash + resume, and bad input."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from benchmarks.datasets import load_file
from tests.support.cli import run_nel, start_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.gsm8k import answers_for
from tests.support.reference import reset_server_stats
from tests.support.waiting import PROCESS_START_S, wait_for


@pytest.fixture(scope="module")
def gsm8k_rows(data_dir: Path) -> list[dict]:
    return load_file(data_dir / "gsm8k" / "test.jsonl")


def test_run_writes_store_bundle_exports_and_reruns_nothing(
        tmp_path: Path, reference_server, server_stats, gsm8k_rows, data_dir: Path) -> None:
    n = 40
    right = set(range(0, n, 2))
    url = reference_server(answers=answers_for(gsm8k_rows[:n], right, preamble="Let me think. 2 + 2 = 4."))
    out = tmp_path / "out"
    args = ["eval", "run", "--bench", "gsm8k", "-m", str(n), "--model-url", url, "--model-id", "ref-model",
            "-o", str(out), "--json", "--no-progress"]
    env = {"NEL_DATA_DIR": str(data_dir)}
    s = summary_json(run_nel(*args, env=env))
    assert s["shards_run"] == 1 and s["requests_sent"] == n
    st = server_stats(url)
    # one preflight GET /v1/models, then exactly one request per sample (no retries)
    assert st["by_endpoint"].get("/v1/chat/completions") == n
    assert st["total_requests"] == n + 1
    (res,) = s["results"]
    assert res["score"] == pytest.approx(0.5) and res["n_items"] == n

    # the Hive-layout Parquet store, with model/shard as real columns
    part = out / "gsm8k" / "shard_results" / "model=ref-model" / "shard=0" / "part-0.parquet"
    t = pq.read_table(part)
    assert t.num_rows == n and set(t.column("model").to_pylist()) == {"ref-model"}
    rows = t.to_pylist()
    assert all(r["finish_reason"] == "stop" and r["completion_tokens"] > 0 for r in rows)
    assert all(r["method"] == "hash_marker" for r in rows)
    assert sum(r["reward"] for r in rows) == len(right)

    # NeMo Evaluator's files, in its layout (<out>/<bench>/)
    exp = Path(res["exports"])
    assert exp == out / "gsm8k"
    evals = list(exp.glob("eval-*.json"))
    assert len(evals) == 1
    ev = json.loads(evals[0].read_text())
    assert ev["metrics"]["score"] == pytest.approx(0.5) and ev["metrics"]["n_items"] == n
    assert ev["metrics"]["ci_95"][0] < 0.5 < ev["metrics"]["ci_95"][1]
    assert len((exp / "results.jsonl").read_text().splitlines()) == n
    traj = [json.loads(x) for x in (exp / "trajectories.jsonl").read_text().splitlines()]
    # the conversation is the ATIF `trajectory` (nel's `messages` copy only when asked)
    steps = traj[0]["trajectory"][0]["steps"]
    assert steps[0]["source"] == "user" and steps[-1]["source"] == "agent"
    assert "messages" not in traj[0]
    rt = json.loads((exp / "runtime_stats.json").read_text())
    assert rt["latency_ms"]["p50"] > 0 and rt["finish_reasons"] == {"stop": n}
    # as NeMo Evaluator, failure_analysis.json only when some step failed
    assert (exp / "failure_analysis.json").exists() == any(r["failure_category"] for r in rows)

    # DuckDB straight over the Parquet files
    con = duckdb.connect()
    q = con.execute(
        f"select count(*), sum(reward), count(distinct sample_id) from read_parquet("
        f"'{out}/*/shard_results/**/*.parquet', hive_partitioning=true) where model='ref-model'"
    ).fetchone()
    assert q == (n, float(len(right)), n)

    # an unchanged rerun sends no request and runs no shard
    reset_server_stats(url)
    s2 = summary_json(run_nel(*args, env=env))
    assert s2["shards_run"] == 0 and s2["shards_fresh"] == 1
    assert server_stats(url)["total_requests"] == 0
    assert s2["results"][0]["score"] == pytest.approx(0.5)

    # a changed setting (repeats) makes the shard stale: it reruns
    s3 = summary_json(run_nel(*args, "-n", "2", env=env))
    assert s3["shards_run"] == 1 and s3["requests_sent"] == 2 * n
    assert s3["results"][0]["n_samples"] == 2 * n


def test_sigkill_then_resume_never_rerequests_a_finished_sample(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    n = 300
    # 60 ms an answer at concurrency 4: ~3.6 s between the 60th journaled sample and the end
    # of the run for the kill to land in, even when the test process waits for a busy CPU.
    url = reference_server(delay_ms=60)
    out = tmp_path / "out"
    args = ["eval", "run", "--bench", "gsm8k", "-m", str(n), "--model-url", url, "--model-id", "m",
            "-o", str(out), "--no-progress", "--max-concurrent", "4", "--json"]
    env = {"NEL_DATA_DIR": str(data_dir)}
    proc = start_nel(*args, env=env, log=tmp_path / "first.log")
    jdir = out / "gsm8k" / "_journal" / "model=m" / "shard=0"

    def journaled_60() -> bool:
        assert proc.poll() is None, "nel exited before 60 samples were journaled:\n" + (
            tmp_path / "first.log").read_text()
        files = list(jdir.glob("*.jsonl")) if jdir.exists() else []
        return bool(files) and sum(1 for _ in open(files[0], "rb")) >= 60

    try:
        wait_for(journaled_60, timeout=PROCESS_START_S, what="60 samples in the shard journal",
                 interval=0.05)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    (jfile,) = list(jdir.glob("*.jsonl"))
    done = {json.loads(x)["sample_id"] for x in jfile.read_bytes().splitlines() if x.endswith(b"}")}
    assert 60 <= len(done) < n
    first = server_stats(url)["prompts"]

    reset_server_stats(url)
    s = summary_json(run_nel(*args, "--resume", env=env))
    second = server_stats(url)["prompts"]
    # every prompt asked again belongs to a sample that had not finished
    data = load_file(data_dir / "gsm8k" / "test.jsonl")[:n]
    prompt_of = {f"{i}:0": r["question"] for i, r in enumerate(data)}
    asked_again = {sid for sid, q in prompt_of.items() if any(q in p for p in second)}
    assert not (asked_again & done)
    assert len(second) == n - len(done)
    assert len(first) >= len(done)
    t = pq.read_table(out / "gsm8k" / "shard_results" / "model=m" / "shard=0" / "part-0.parquet")
    assert t.num_rows == n and len(set(t.column("sample_id").to_pylist())) == n
    assert s["results"][0]["n_samples"] == n
    assert not list(jdir.glob("*.jsonl"))  # journal discarded once committed


def test_failed_requests_are_errors_not_zeros(tmp_path: Path, reference_server, data_dir: Path) -> None:
    url = reference_server(fail_rate=0.3, fail_status=500, fail_attempts=100)
    out = tmp_path / "out"
    proc = run_nel("eval", "run", "-b", "gsm8k", "-m", "30", "--model-url", url,
                   "-o", str(out), "--json", "--no-progress",
                   "-O", "services.default.max_retries=1",
                   "-O", "services.default.retry_backoff=0.01",
                   env={"NEL_DATA_DIR": str(data_dir)})
    s = summary_json(proc)  # some samples failed, not all: the evaluation stands (exit 0)
    res = s["results"][0]
    assert 0 < res["failed"] < 30
    assert error_lines(proc.stdout, proc.stderr) == []
    assert f"warning: gsm8k/default: {res['failed']} samples failed and are not in the score" in proc.stderr
    t = pq.read_table(out / "gsm8k" / "shard_results" / "model=default" / "shard=0" / "part-0.parquet").to_pylist()
    failed = [r for r in t if r["error"]]
    assert len(failed) == res["failed"]
    assert all(r["reward"] is None and r["failure_category"] == "error" and r["attempts"] == 2 for r in failed)
    assert res["n_samples"] == 30 - len(failed)  # the score is over scored samples only


def test_system_prompt_reaches_the_model(tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    """Under `--prompt-set nel` the system prompt reaches the model; under the default
    (NeMo Evaluator 0.3.0's request) it does not, as in 0.3.0, and the run says so."""
    url = reference_server()
    p = run_nel("eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", url, "--prompt-set", "nel",
                "--system-prompt", "You are terse.", "-o", str(tmp_path / "o"), "--json",
                "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    summary_json(p)
    st = server_stats(url)["system_messages"]
    assert st["count"] == 5 and st["last"] == "You are terse."
    assert "prompt_set nemo" not in p.stderr

    url = reference_server()
    p = run_nel("eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", url,
                "--system-prompt", "You are terse.", "-o", str(tmp_path / "o2"), "--json",
                "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    summary_json(p)
    assert server_stats(url)["system_messages"]["count"] == 0
    assert server_stats(url)["total_requests"] >= 5
    assert ("note: gsm8k: prompt_set nemo sends NeMo Evaluator 0.3.0's request, which has no "
            "system prompt; set `prompt_set: nel` (or --prompt-set nel)") in p.stderr


def test_switching_the_prompt_set_reruns_the_shards_it_changes(tmp_path: Path, reference_server,
                                                               data_dir: Path) -> None:
    url = reference_server()
    out = str(tmp_path / "o")

    def run(*extra: str) -> dict:
        return summary_json(run_nel("eval", "run", "-b", "gsm8k", "-m", "4", "--model-url", url, "-o", out,
                                    "--json", "--no-progress", *extra, env={"NEL_DATA_DIR": str(data_dir)}))

    assert run()["shards_run"] == 1
    assert run("--prompt-set", "nemo")["shards_run"] == 0  # the default, named
    s = run("--prompt-set", "nel")
    assert s["shards_run"] == 1 and s["requests_sent"] == 4  # other requests: asked again
    assert run("--prompt-set", "nel")["shards_run"] == 0


@pytest.mark.parametrize(("args", "message", "status"), [
    (["-b", "gsm8", "--model-url", "http://127.0.0.1:9/v1"], "did you mean 'gsm8k'", 2),
    # an unreachable endpoint is found during the run: that (benchmark, model) failed
    (["-b", "gsm8k", "--model-url", "http://127.0.0.1:9/v1", "-m", "2"], "cannot reach the model endpoint", 4),
    (["-b", "gsm8k"], "no model endpoint", 2),
])
def test_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], message: str, status: int,
                                     data_dir: Path) -> None:
    p = run_nel("eval", "run", *args, "-o", str(tmp_path / "o"), "--no-progress",
                env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == status
    (line,) = error_lines(p.stdout, p.stderr)
    assert message in line


def test_auth_error_stops_without_retry_storm(tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server(require_api_key="right-key")
    p = run_nel("eval", "run", "-b", "gsm8k", "-m", "50", "--model-url", url, "--api-key", "wrong",
                "-o", str(tmp_path / "o"), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == 4
    (line,) = error_lines(p.stdout, p.stderr)
    assert "refused the API key" in line
    assert server_stats(url)["total_requests"] <= 1
    assert "wrong" not in p.stderr  # the key is never printed


def test_missing_key_variable_and_bad_yaml(tmp_path: Path, data_dir: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("services:\n  m:\n    url: http://127.0.0.1:9/v1\n    api_key_env: NEL_NO_SUCH_KEY\n"
                   "benchmarks:\n  - name: gsm8k\n    max_problems: 2\n")
    p = run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "o"), env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == 2 and "NEL_NO_SUCH_KEY" in p.stderr and "Traceback" not in p.stderr
    cfg.write_text("services:\n  m:\n    url: http://x\n  bad: [\nbenchmarks: []\n")
    p = run_nel("eval", "run", str(cfg))
    assert p.returncode == 2 and f"{cfg}:" in p.stderr and "invalid YAML" in p.stderr


def test_effective_config_is_saved_for_the_ui(tmp_path: Path, reference_server, data_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`nel-config.yaml` next to the results rebuilds the same graph, and every shard the
    CLI ran reads as fresh through it (what `dagster dev` on that config shows)."""
    from nel_assets.engine.evaluation.evaluate import plan
    from nel_assets.factory import build_defs
    from nel_resources.config import load_config
    from nel_resources.specs import resolve
    from nel_resources.storage.store import ResultStore

    url = reference_server()
    out = tmp_path / "out"
    summary_json(run_nel("eval", "run", "-b", "gsm8k", "-m", "12", "--shards", "3", "--model-url", url,
                         "--model-id", "ref", "--api-key", "sk-literal-secret", "-o", str(out),
                         "--system-prompt", "Be exact.", "--json", "--no-progress",
                         env={"NEL_DATA_DIR": str(data_dir)}))
    saved = out / "nel-config.yaml"
    assert "sk-literal-secret" not in saved.read_text()
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    cfg = resolve(load_config(saved))
    keys = {k.to_user_string() for k in build_defs(cfg).resolve_asset_graph().get_all_asset_keys()}
    assert {"gsm8k/dataset", "gsm8k/shard_results", "gsm8k/bundle", "gsm8k/report"} <= keys
    tasks = plan(ResultStore(out), cfg.benchmarks[0])
    assert len(tasks) == 3 and not any(t.stale for t in tasks)
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".jsonl", ".yaml", ".md"):
            assert "sk-literal-secret" not in p.read_text(errors="ignore"), p


def test_eval_run_compares_with_the_baseline_and_reports_the_gate(
        tmp_path: Path, reference_server, server_stats, gsm8k_rows, data_dir: Path) -> None:
    """With `comparison.baseline`, `nel eval run` also materializes each candidate's
    comparison and runs the gate check; a rerun with nothing changed reuses them."""
    n = 60
    good = reference_server(answers=answers_for(gsm8k_rows[:n], set(range(n))))
    worse = reference_server(answers=answers_for(gsm8k_rows[:n], set(range(0, n, 2))))
    cfg = tmp_path / "c.yaml"
    out = tmp_path / "out"
    cfg.write_text(f"services:\n  base: {{url: {good}, model: base}}\n  same: {{url: {good}, model: same}}\n"
                   f"  worse: {{url: {worse}, model: worse}}\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {n}\n"
                   f"comparison:\n  baseline: base\n  max_drop: 0.1\noutput:\n  dir: {out}\n")
    # 60 identical answers rule out a 10-point drop (the paired CI is honest about 0 discordant
    # pairs: a 5-point drop cannot be ruled out with 60 items), and a 50-point one is a NO-GO.
    env = {"NEL_DATA_DIR": str(data_dir)}
    p = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env)
    assert p.returncode == 1, p.stderr  # a NO-GO, as `nel gate --strict` says it
    s = json.loads(p.stdout)
    assert s["exit_status"] == 1 and error_lines(p.stdout, p.stderr) == []
    assert s["gates"]["worse"]["decision"] == "NO-GO"
    assert s["gates"]["same"]["decision"] == "GO"
    assert "base" not in s["gates"]
    reg = json.loads((out / "comparison" / "comparison" / "model=worse" / "regression.json").read_text())
    assert reg["gate"]["decision"] == "NO-GO"
    # the table view of the same run prints the verdicts
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    assert p.returncode == 1 and "gate worse vs base: NO-GO" in p.stdout and "gate same vs base: GO" in p.stdout
    p2 = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env)
    s2 = json.loads(p2.stdout)
    assert p2.returncode == 1 and s2["dagster_runs"] == 0 and s2["gates"]["worse"]["decision"] == "NO-GO"
    # a torn regression.json (a crash mid-write by an older writer) is rebuilt, no request sent
    reg_path = out / "comparison" / "comparison" / "model=worse" / "regression.json"
    reg_path.write_text(reg_path.read_text()[:100])
    p3 = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env)
    s3 = json.loads(p3.stdout)
    assert p3.returncode == 1 and s3["requests_sent"] == 0 and s3["gates"]["worse"]["decision"] == "NO-GO"
    assert json.loads(reg_path.read_text())["gate"]["decision"] == "NO-GO"
    # only GO verdicts: exit 0
    cfg.write_text(cfg.read_text().replace(f"  worse: {{url: {worse}, model: worse}}\n", ""))
    s4 = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env))
    assert s4["gates"] == {"same": s4["gates"]["same"]} and s4["gates"]["same"]["decision"] == "GO"
