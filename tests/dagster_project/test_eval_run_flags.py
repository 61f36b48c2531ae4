"""`nel eval run` flags of NeMo Evaluator 0.3.0 (--temperature, --max-tokens, --dry-run,
--submit, --background, -v, --adapter, NEMO_API_KEY, --bench FILE.py[:NAME]), the
`max_problems` selection (shuffle_seed), and `eval merge` / `eval report` / `report` flags,
all against the reference server and the real gsm8k data."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.cli import run_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.waiting import PROCESS_START_S, wait_for

URL_ARGS = ("--no-progress",)  # the CLI has no terminal here


def _flags(url: str, out: Path, *extra: str) -> list[str]:
    return ["eval", "run", "--bench", "gsm8k", "--model-url", url, "--model-id", "ref",
            "-o", str(out), *URL_ARGS, *extra]


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    return {"NEL_DATA_DIR": str(data_dir), **extra}


def _problem_ids(out: Path, model: str = "ref") -> set[int]:
    parts = (out / "gsm8k" / "shard_results" / f"model={model}").glob("shard=*/part-0.parquet")
    return {int(i) for p in parts for i in pq.read_table(p, columns=["problem_idx"]).column("problem_idx").to_pylist()}


def _peer_pick(n_total: int, n: int, seed: int = 42) -> set[int]:
    """What NeMo Evaluator 0.3.0's eval loop selects (checked against the real peer in
    test_peer_eval_parity.py)."""
    perm = list(range(n_total))
    random.Random(seed).shuffle(perm)
    return set(perm[:n])


N_GSM8K = 1319


def test_temperature_and_max_tokens_are_sent(tmp_path: Path, reference_server, server_stats, data_dir) -> None:
    url = reference_server()
    s = summary_json(run_nel(*_flags(url, tmp_path / "a", "-m", "2", "--json"), env=_env(data_dir)))
    assert s["requests_sent"] == 2
    # flag runs send temperature 0.0 unless told otherwise, as NeMo Evaluator's quick mode
    assert server_stats(url)["last_request"]["temperature"] == 0.0
    assert "max_tokens" not in server_stats(url)["last_request"]

    url2 = reference_server()
    s = summary_json(run_nel(*_flags(url2, tmp_path / "b", "-m", "2", "--json", "--temperature", "0.7",
                                     "--max-tokens", "33"), env=_env(data_dir)))
    req = server_stats(url2)["last_request"]
    assert (req["temperature"], req["max_tokens"]) == (0.7, 33)
    # the same flags override a config's services too
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: {url2}\n    model: ref\n    temperature: 0.1\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: 1\noutput:\n  dir: {tmp_path / 'c'}\n")
    p = run_nel("eval", "run", str(cfg), "--temperature", "0.25", "--max-tokens", "9", "--no-progress",
                env=_env(data_dir))
    assert p.returncode == 0, p.stderr
    req = server_stats(url2)["last_request"]
    assert (req["temperature"], req["max_tokens"]) == (0.25, 9)


def test_dry_run_plans_and_sends_nothing(tmp_path: Path, reference_server, server_stats, data_dir) -> None:
    url = reference_server()
    out = tmp_path / "out"
    env = _env(data_dir)
    p = run_nel(*_flags(url, out, "-m", "5", "--shards", "2", "--dry-run", "--json"), env=env)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert [(s["shard"], s["action"], s["reason"]) for s in plan["shards"]] == [
        (0, "run", "no results yet"), (1, "run", "no results yet")]
    assert sum(s["n_problems"] for s in plan["shards"]) == 5
    assert server_stats(url)["total_requests"] == 0  # not even the /v1/models preflight
    assert not out.exists()  # nothing written

    summary_json(run_nel(*_flags(url, out, "-m", "5", "--shards", "2", "--json"), env=env))
    sent = server_stats(url)["total_requests"]
    again = json.loads(run_nel(*_flags(url, out, "-m", "5", "--shards", "2", "--dry-run", "--json"), env=env).stdout)
    assert {(s["action"], s["reason"]) for s in again["shards"]} == {("skip", "up to date")}
    # another seed picks other problems: every shard is stale, and the text plan says why
    text = run_nel(*_flags(url, out, "-m", "5", "--shards", "2", "--dry-run", "--shuffle-seed", "7"), env=env)
    assert text.returncode == 0 and text.stdout.count("would run: gsm8k model=ref") == 2
    assert "inputs changed" in text.stdout and "shuffled with seed 7" in text.stdout
    # one shard process of a distributed run plans its own shard only, as it would run it
    one = run_nel(*_flags(url, tmp_path / "one", "-m", "5", "--dry-run", "--json"),
                  env={**env, "NEL_SHARD_IDX": "1", "NEL_TOTAL_SHARDS": "2"})
    assert [(s["shard"], s["total"]) for s in json.loads(one.stdout)["shards"]] == [(1, 2)]
    assert server_stats(url)["total_requests"] == sent


def test_dry_run_starts_no_model_server_and_refuses_bad_configs(tmp_path: Path, data_dir) -> None:
    marker = tmp_path / "server-started"
    # A launched service whose command would leave a marker file if it were ever started.
    cfg = tmp_path / "launch.yaml"
    cfg.write_text(
        "services:\n  local:\n    type: vllm\n    model: tiny\n"
        f"    command: {json.dumps([sys.executable, '-c', f'open({str(marker)!r}, chr(119))'])}\n"
        "benchmarks:\n  - name: gsm8k\n    max_problems: 3\n"
        f"output:\n  dir: {tmp_path / 'out'}\n")
    p = run_nel("eval", "run", str(cfg), "--dry-run", env=_env(data_dir))
    assert p.returncode == 0, p.stderr
    assert "would run: gsm8k model=local shard=0/1 (3 problems): no results yet" in p.stdout
    assert "not in a dry run" in p.stdout
    assert not marker.exists() and not (tmp_path / "out").exists()

    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1'}\nbenchmarks:\n  - name: gsm8kk\n")
    p = run_nel("eval", "run", str(bad), "--dry-run", env=_env(data_dir))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = error_lines(p.stdout, p.stderr)
    assert "gsm8kk" in line


def test_max_problems_picks_nemo_evaluators_items_and_first_n_keeps_order(
        tmp_path: Path, reference_server, server_stats, data_dir) -> None:
    url = reference_server()
    env = _env(data_dir)
    out = tmp_path / "shuffled"
    # the real default: no NEL_SHUFFLE_SEED (the suite sets it for older first-N tests)
    p = run_nel(*_flags(url, out, "-m", "8", "--shards", "3", "--json"), env=env, unset=["NEL_SHUFFLE_SEED"])
    summary_json(p)
    assert _problem_ids(out) == _peer_pick(N_GSM8K, 8)
    bundle = json.loads((out / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["shuffle"] == {"seed": 42, "applied": True, "ds_full_size": N_GSM8K, "ds_effective_size": 8}
    (export,) = (out / "gsm8k").glob("eval-*.json")
    assert json.loads(export.read_text())["config"]["shuffle"]["seed"] == 42

    # a changed seed reruns every shard and picks that seed's items
    s = summary_json(run_nel(*_flags(url, out, "-m", "8", "--shards", "3", "--json", "--shuffle-seed", "5"),
                             env=env, unset=["NEL_SHUFFLE_SEED"]))
    assert s["shards_run"] == 3 and set(s["shards_run_because"].values()) == {"inputs changed"}
    assert _problem_ids(out) == _peer_pick(N_GSM8K, 8, seed=5)
    # the effective config names the seed, so `dagster dev` on it picks the same items
    assert yaml.safe_load((out / "nel-config.yaml").read_text())["benchmarks"][0]["shuffle_seed"] == 5

    first = tmp_path / "first"
    summary_json(run_nel(*_flags(url, first, "-m", "8", "--json", "--first-n"), env=env, unset=["NEL_SHUFFLE_SEED"]))
    assert _problem_ids(first) == set(range(8))
    bundle = json.loads((first / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["shuffle"]["applied"] is False and bundle["shuffle"]["seed"] is None
    # the config key does the same: shuffle_seed: null
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  ref:\n    type: api\n    url: {url}\n    model: ref\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: 4\n    shuffle_seed: null\n"
                   f"output:\n  dir: {tmp_path / 'c'}\n")
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=["NEL_SHUFFLE_SEED"]).returncode == 0
    assert _problem_ids(tmp_path / "c") == set(range(4))


def test_refused_and_no_op_flags(tmp_path: Path, reference_server, server_stats, data_dir) -> None:
    url = reference_server()
    env = _env(data_dir)
    p = run_nel(*_flags(url, tmp_path / "a", "-m", "2", "--adapter", "reasoning"), env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = error_lines(p.stdout, p.stderr)
    assert "--adapter" in line and "`interceptors:`" in line and "NeMo Evaluator 0.3.0" in line
    assert server_stats(url)["total_requests"] == 0

    # --submit on a local run does nothing, as in NeMo Evaluator, and says so; --no-submit too
    p = run_nel(*_flags(url, tmp_path / "b", "-m", "2", "--submit"), env=env)
    assert p.returncode == 0 and "--submit has no effect with cluster.type: local" in p.stderr
    assert run_nel(*_flags(url, tmp_path / "c", "-m", "2", "--no-submit"), env=env).returncode == 0

    p = run_nel(*_flags(url, tmp_path / "d", "-m", "2", "-v"), env=env)
    assert p.returncode == 0 and " DEBUG " in p.stderr


def test_submit_on_a_docker_or_ray_cluster_is_a_noted_no_op(tmp_path: Path, data_dir) -> None:
    """nel launches docker containers and Ray tasks itself: `--submit` changes nothing there
    and says so (a dry run: nothing is launched, no request is sent)."""
    for kind in ("docker", "ray"):
        cfg = tmp_path / f"{kind}.yaml"
        cfg.write_text("services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1', model: m}\n"
                       "benchmarks:\n  - name: gsm8k\n    max_problems: 2\n"
                       f"cluster:\n  type: {kind}\noutput:\n  dir: {tmp_path / kind}\n")
        p = run_nel("eval", "run", str(cfg), "--submit", "--dry-run", env=_env(data_dir))
        assert p.returncode == 0, p.stderr
        assert f"--submit has no effect with cluster.type: {kind}; nel launches the shards itself" \
            in p.stderr
        assert "1 partition(s) would run" in p.stdout


def test_nemo_api_key_is_the_default_key_variable(tmp_path: Path, reference_server, data_dir) -> None:
    url = reference_server(require_api_key="sekrit-123")
    unset = ["NEMO_API_KEY", "NVIDIA_API_KEY", "NEL_API_KEY_ENV"]
    p = run_nel(*_flags(url, tmp_path / "a", "-m", "2"), env=_env(data_dir, NEMO_API_KEY="sekrit-123"),
                unset=["NVIDIA_API_KEY", "NEL_API_KEY_ENV"])
    assert p.returncode == 0, p.stderr
    # the effective config keeps the variable's name, never its value
    saved = (tmp_path / "a" / "nel-config.yaml").read_text()
    assert "NEMO_API_KEY" in saved and "sekrit-123" not in saved
    # NEMO_API_KEY wins over NVIDIA_API_KEY (the peer's order)
    p = run_nel(*_flags(url, tmp_path / "b", "-m", "2"),
                env=_env(data_dir, NEMO_API_KEY="sekrit-123", NVIDIA_API_KEY="wrong"), unset=["NEL_API_KEY_ENV"])
    assert p.returncode == 0, p.stderr
    p = run_nel(*_flags(url, tmp_path / "c", "-m", "2"), env=_env(data_dir, NVIDIA_API_KEY="sekrit-123"),
                unset=["NEMO_API_KEY", "NEL_API_KEY_ENV"])
    assert p.returncode == 0, p.stderr
    p = run_nel(*_flags(url, tmp_path / "d", "-m", "2"), env=_env(data_dir), unset=unset)
    assert p.returncode != 0 and "401" in p.stderr + p.stdout


BYOB_TWO = '''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer

@benchmark(name="flags_caps_a", dataset=[{"q": "Capital of France?", "a": "Paris"},
                                          {"q": "Capital of Japan?", "a": "Tokyo"}],
           prompt="{q}", target_field="a")
@scorer
def a(inp: ScorerInput) -> dict:
    return exact_match(inp)

@benchmark(name="flags_caps_b", dataset=[{"q": "Capital of Peru?", "a": "Lima"}],
           prompt="{q}", target_field="a")
@scorer
def b(inp: ScorerInput) -> dict:
    return exact_match(inp)
'''


def test_bench_file_and_file_colon_name(tmp_path: Path, reference_server, server_stats) -> None:
    url = reference_server(answers=[{"match": "Capital of Peru?", "content": "Lima"}])
    f = tmp_path / "two_benches.py"
    f.write_text(BYOB_TWO)
    base = ["eval", "run", "--model-url", url, "--model-id", "ref", "--no-progress", "--json"]
    p = run_nel(*base, "--bench", str(f), "-o", str(tmp_path / "a"))
    assert p.returncode == 2
    (line,) = error_lines(p.stdout, p.stderr)
    assert "registers 2 benchmarks" in line and f"{f}:<name>" in line
    s = summary_json(run_nel(*base, "--bench", f"{f}:flags_caps_b", "-o", str(tmp_path / "b")))
    (res,) = s["results"]
    assert (res["benchmark"], res["score"], res["n_items"]) == ("flags_caps_b", 1.0, 1)
    p = run_nel(*base, "--bench", f"{f}:nope", "-o", str(tmp_path / "c"))
    assert p.returncode == 2 and "does not register a benchmark 'nope'" in p.stderr
    p = run_nel(*base, "--bench", str(tmp_path / "missing.py"), "-o", str(tmp_path / "d"))
    assert p.returncode == 2 and "no such benchmark file" in p.stderr


def test_background_run_detaches_and_is_readable(tmp_path: Path, reference_server, server_stats, data_dir) -> None:
    url = reference_server()
    out = tmp_path / "bg"
    p = run_nel(*_flags(url, out, "-m", "3", "--background"), env=_env(data_dir))
    assert p.returncode == 0, p.stderr
    assert "background evaluation started (PID" in p.stdout
    pid = int(p.stdout.split("PID ", 1)[1].split(")", 1)[0])
    log = out / "nel_eval.log"

    def finished() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a finished child not yet reaped by its (gone) parent is a zombie: finished too
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z")

    wait_for(finished, timeout=PROCESS_START_S, what="the background run to finish")
    assert not (out / "nel.pid").exists()  # removed by the run when it ended
    text = log.read_text()
    assert "exit status 0" in text and "gsm8k" in text
    assert json.loads((out / "checkpoint.json").read_text())["exit_status"] == 0
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 3

    # a config error is reported at once, not in the background log
    p = run_nel("eval", "run", "--bench", "gsm8kk", "--model-url", url, "-o", str(tmp_path / "x"),
                "--background", env=_env(data_dir))
    assert p.returncode == 2 and not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """NeMo Evaluator's layout: OUTPUT_DIR/shard_0, shard_1, each one shard process's output."""
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    root = tmp_path_factory.mktemp("sharded") / "run"
    try:
        for i in (0, 1):
            p = run_nel(*_flags(url, root / f"shard_{i}", "-m", "6", "-n", "2"),
                        env=_env(data_dir, NEL_SHARD_IDX=str(i), NEL_TOTAL_SHARDS="2"))
            assert p.returncode == 0, p.stderr
    finally:
        proc.stop()
    return root


def test_merge_over_shard_subdirectories(sharded_run: Path) -> None:
    p = run_nel("eval", "merge", str(sharded_run), "-n", "3")
    assert p.returncode == 1 and "do not hold 3 repeats (-n/--repeats)" in p.stdout
    assert not (sharded_run / "gsm8k" / "bundle").exists()
    p = run_nel("eval", "merge", str(sharded_run), "-n", "2", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["merged"] and rep["shards"] == {"gsm8k/ref": [0, 1]}
    bundle = json.loads((sharded_run / "gsm8k" / "bundle" / "model=ref" / "bundle.json").read_text())
    assert bundle["score"]["n_items"] == 6 and bundle["score"]["n_samples"] == 12
    # -r names a recorded run (`nel eval jobs`); an unknown id is NeMo Evaluator's error, exit 1
    p = run_nel("eval", "merge", "-r", "abc123")
    assert p.returncode == 1 and p.stderr.strip() == "Error: No run metadata found for run-id=abc123."


def test_report_flags_and_bundle_files(sharded_run: Path, tmp_path: Path) -> None:
    assert run_nel("eval", "merge", str(sharded_run)).returncode == 0
    bundle = sharded_run / "gsm8k" / "bundle" / "model=ref" / "bundle.json"
    p = run_nel("report", str(bundle), "-f", "markdown")
    assert p.returncode == 0 and "| gsm8k | ref |" in p.stdout
    (export,) = (sharded_run / "gsm8k").glob("eval-*.json")
    p = run_nel("report", str(export), "-f", "csv")
    assert p.returncode == 0 and "gsm8k" in p.stdout
    p = run_nel("report", str(tmp_path / "nope.json"))
    assert p.returncode == 2 and "no such output directory or bundle file" in p.stderr

    p = run_nel("eval", "report", str(sharded_run), "--with-results")
    assert p.returncode == 0 and "| gsm8k | ref |" in p.stdout and "--with-results" in p.stderr
    p = run_nel("eval", "report", "-r", "abc123")
    assert p.returncode == 1 and "No run metadata found for run-id=abc123" in p.stderr
    # a recorded run's id names that run's output directory: here the shard-0 process, which
    # bundles its own shard (as NeMo Evaluator's shard processes do): 3 of the 6 items
    run_id = json.loads((sharded_run / "shard_0" / "nel_run.json").read_text())["run_id"]
    p = run_nel("eval", "report", "-r", run_id, "-f", "json")
    assert p.returncode == 0, p.stderr
    (b,) = json.loads(p.stdout)["bundles"]
    assert b["score"]["n_items"] == 3 and b["complete"] is False
    # --all-formats without -o writes into the current directory, as NeMo Evaluator does
    p = run_nel("eval", "report", str(sharded_run), "--all-formats", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert {f.name for f in tmp_path.glob("report.*")} == {"report.md", "report.html", "report.csv",
                                                           "report.json", "report.tex"}
