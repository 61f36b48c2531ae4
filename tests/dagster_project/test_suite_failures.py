"""A suite keeps going when one (benchmark, model) fails: the others run to the end, each
failure is one `error:` line (its traceback in `<out>/logs/nel-run.log`, never on the
terminal), `<out>/checkpoint.json` records what completed and what failed, and the run exits
with the failed-evaluation status (4). Real reference servers, real data, real Dagster."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from dagster_project import exit_codes
from tests.support.cli import run_nel, started_nel
from tests.support.cli_output import error_lines
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import reset_server_stats
from tests.support.waiting import wait_while_running


def _results(stdout: str) -> dict[tuple[str, str], dict]:
    return {(r["benchmark"], r["model"]): r for r in json.loads(stdout)["results"]}


def test_a_dead_endpoint_and_missing_data_fail_alone(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server()
    partial = tmp_path / "data"  # real GSM8K, no MMLU
    partial.mkdir()
    (partial / "gsm8k").symlink_to(data_dir / "gsm8k")
    out = tmp_path / "out"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  good: {{url: {url}, model: good}}\n"
                   f"  dead: {{url: 'http://127.0.0.1:9/v1', model: dead}}\n"
                   f"benchmarks:\n  - {{name: gsm8k, max_problems: 5}}\n  - {{name: mmlu, max_problems: 5}}\n"
                   f"output:\n  dir: {out}\n")
    offline = {"HF_HUB_OFFLINE": "1"}
    p = run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                env={"NEL_DATA_DIR": str(partial), **offline})
    assert p.returncode == exit_codes.EVAL_FAILED, p.stderr
    errors = error_lines(p.stdout, p.stderr)
    assert len(errors) == 3, errors
    by_pair = {ln.split(":")[1].strip(): ln for ln in errors}
    assert "cannot reach the model endpoint" in by_pair["gsm8k/dead"]
    assert "test CSVs not found" in by_pair["mmlu/good"] and "test CSVs not found" in by_pair["mmlu/dead"]
    log = out / "logs" / "nel-run.log"
    assert all(str(log) in ln for ln in errors)

    # the healthy pair ran to the end
    res = _results(p.stdout)
    assert set(res) == {("gsm8k", "good")} and res[("gsm8k", "good")]["n_items"] == 5
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions") == 5
    assert (Path(res[("gsm8k", "good")]["exports"]) / "results.jsonl").exists()

    # the record
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["status"] == "failed" and ck["exit_status"] == 4
    assert [(c["name"], c["model"]) for c in ck["completed_benchmarks"].values()] == [("gsm8k", "good")]
    assert {(f["name"], f["model"]) for f in ck["failed_benchmarks"].values()} == {
        ("gsm8k", "dead"), ("mmlu", "good"), ("mmlu", "dead")}
    assert all(f["reason"] and "\n" not in f["reason"] for f in ck["failed_benchmarks"].values())
    assert ck["started_at"] <= ck["finished_at"]
    assert json.loads(p.stdout)["failed_benchmarks"] == ck["failed_benchmarks"]
    # the tracebacks went to the log
    text = log.read_text()
    assert "EndpointUnreachableError" in text and "Stack Trace" in text and "DataMissingError" in text

    # with the data in place, a rerun runs what failed and re-asks nothing that completed
    reset_server_stats(url)
    p2 = run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                 env={"NEL_DATA_DIR": str(data_dir), **offline})
    assert p2.returncode == exit_codes.EVAL_FAILED
    assert [ln.split(":")[1].strip() for ln in error_lines(p2.stdout, p2.stderr)] == ["gsm8k/dead", "mmlu/dead"]
    assert set(_results(p2.stdout)) == {("gsm8k", "good"), ("mmlu", "good")}
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions") == 5  # mmlu's only


def test_an_endpoint_dying_mid_run_fails_its_pair_only(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    good = reference_server()
    dying = reference_server(delay_ms=600_000)  # holds every answer until it is stopped
    out = tmp_path / "out"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  dying: {{url: {dying}, model: dying, max_retries: 1, retry_backoff: 0.01}}\n"
                   f"  good: {{url: {good}, model: good}}\n"
                   f"benchmarks:\n  - {{name: gsm8k, max_problems: 4}}\noutput:\n  dir: {out}\n")
    with started_nel("eval", "run", str(cfg), "--json", "--no-progress", out_dir=tmp_path,
                     env={"NEL_DATA_DIR": str(data_dir)}) as (proc, stdout, stderr):
        wait_while_running(lambda: server_stats(dying)["by_endpoint"].get("/v1/chat/completions", 0) >= 1,
                           proc=proc, what="a request at the dying server", log=stderr)
        reference_server.processes[dying].stop()
        rc = proc.wait(timeout=300)
    assert rc == exit_codes.EVAL_FAILED, stderr.read_text()
    errors = error_lines(stdout.read_text(), stderr.read_text())
    assert len(errors) == 1 and errors[0].startswith("error: gsm8k/dying: every sample failed (4 of 4)"), errors
    res = _results(stdout.read_text())
    assert res[("gsm8k", "good")]["n_items"] == 4 and res[("gsm8k", "good")]["failed"] == 0
    ck = json.loads((out / "checkpoint.json").read_text())
    assert [(f["name"], f["model"], f["stage"]) for f in ck["failed_benchmarks"].values()] == [("gsm8k", "dying", "scores")]


def test_failed_samples_a_refused_key_and_nothing_to_evaluate(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    broken = reference_server(fail_always_status=500)
    locked = reference_server(require_api_key="right-key")
    good = reference_server()
    out = tmp_path / "out"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  broken: {{url: {broken}, max_retries: 0}}\n"
                   f"  locked: {{url: {locked}, api_key: wrong-key}}\n  good: {{url: {good}}}\n"
                   f"benchmarks:\n  - {{name: gsm8k, max_problems: 3}}\n"
                   f"  - {{name: mmlu, problem_range: '5:5'}}\noutput:\n  dir: {out}\n")
    p = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == exit_codes.EVAL_FAILED, p.stderr
    errors = error_lines(p.stdout, p.stderr)
    by_pair = {ln.split(":")[1].strip(): ln for ln in errors}
    assert set(by_pair) == {"gsm8k/broken", "gsm8k/locked", "mmlu/broken", "mmlu/locked", "mmlu/good"}
    assert "every sample failed (3 of 3); first error: HTTP 500" in by_pair["gsm8k/broken"]
    assert "refused the API key" in by_pair["gsm8k/locked"]
    # a range past the data selects nothing: that benchmark fails, the others still run
    assert all("problem range 5:5 is empty" in by_pair[f"mmlu/{m}"] for m in ("broken", "locked", "good"))
    assert "wrong-key" not in p.stdout + p.stderr
    assert server_stats(locked)["total_requests"] <= 1
    assert set(_results(p.stdout)) == {("gsm8k", "good"), ("gsm8k", "broken")}

    # an up-to-date rerun reports the same verdict: a stored all-failed result is no success
    p2 = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert p2.returncode == exit_codes.EVAL_FAILED
    assert "gsm8k/broken: every sample failed" in p2.stderr


def test_a_clean_suite_exits_0_with_a_completed_checkpoint(
        tmp_path: Path, reference_server, data_dir: Path) -> None:
    url = reference_server()
    out = tmp_path / "out"
    p = run_nel("eval", "run", "-b", "gsm8k", "-b", "mmlu", "-m", "3", "--model-url", url, "-o", str(out),
                "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == 0, p.stderr
    assert error_lines(p.stdout, p.stderr) == []
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["status"] == "completed" and ck["failed_benchmarks"] == {} and ck["exit_status"] == 0
    assert {c["name"] for c in ck["completed_benchmarks"].values()} == {"gsm8k", "mmlu"}


@pytest.mark.parametrize(("failures", "decisions", "status"), [
    (0, [], 0), (0, ["GO", "GO"], 0), (0, ["GO", "NO-GO", "INCONCLUSIVE"], 1),
    (0, ["GO", "INCONCLUSIVE"], 3), (1, ["GO"], 4), (2, ["NO-GO"], 4),
])
def test_exit_status_scheme(failures: int, decisions: list[str], status: int) -> None:
    assert exit_codes.eval_run_status(failures, decisions) == status


def test_help_documents_the_exit_statuses() -> None:
    p = run_nel("eval", "run", "--help")
    assert p.returncode == 0
    page = (REPO_ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    for code, _ in exit_codes.TABLE:
        assert f"\n  {code:<4} " in p.stdout, code
        assert f"\n| {code} | " in page, f"docs/reference/exit-codes.md lacks {code}"


def test_ctrl_c_stops_the_whole_suite_with_130(tmp_path: Path, reference_server, server_stats,
                                               data_dir: Path) -> None:
    """Dagster turns SIGINT into a failed step; isolation must not treat it as one benchmark's
    failure and go on with the next."""
    # One answer a second: the 20 problems leave a window of about 19 s between the first
    # journaled sample and the end of gsm8k for the Ctrl-C to land in, even on a busy machine
    # (a 4-s window once closed before the signal was handled).
    url = reference_server(delay_ms=1000)
    out = tmp_path / "out"
    journal = out / "gsm8k" / "_journal" / "model=default" / "shard=0"
    with started_nel("eval", "run", "-b", "gsm8k", "-b", "mmlu", "-m", "20", "--model-url", url,
                     "-o", str(out), "--no-progress", "--max-concurrent", "1", out_dir=tmp_path,
                     env={"NEL_DATA_DIR": str(data_dir)}) as (proc, stdout, stderr):
        wait_while_running(lambda: journal.exists() and any(f.stat().st_size for f in journal.glob("*.jsonl")),
                           proc=proc, what="a journaled sample", log=stderr)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        rc = proc.wait(timeout=120)
    assert rc == exit_codes.INTERRUPTED, stderr.read_text()
    assert "Traceback" not in stdout.read_text() + stderr.read_text(), stderr.read_text()
    assert stderr.read_text().strip().splitlines()[-1] == "interrupted"
    assert not (out / "mmlu" / "shard_results").exists()  # the next benchmark never started
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions", 0) < 20


SUITE = REPO_ROOT / "tests" / "fixtures" / "nemo_configs" / "examples" / "17_suite_release.yaml"


def test_the_walkthrough_suite_runs_with_its_judgeless_simpleqa_failing_alone(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    """NeMo Evaluator's release suite (gsm8k, mmlu, humaneval in a docker sandbox, simpleqa
    with no judge), unchanged but for the endpoint and the locally built image: simpleqa
    cannot run as written, so it is one warning line up front, one `error:` line and a
    `failed_benchmarks` entry; the three others run to the end; exit 4."""
    from tests.support.docker_engine import BASE_IMAGE, start_docker_engine

    url = reference_server()
    out = tmp_path / "out"
    env = {"NEL_DATA_DIR": str(data_dir), "NEL_TEST_URL": f"{url}/chat/completions",
           "DOCKER_HOST": start_docker_engine()}
    p = run_nel("eval", "run", str(SUITE), "-o", str(out), "--json", "--no-progress",
                "-O", f"sandboxes.humaneval_code.image={BASE_IMAGE}", "-O", "benchmarks.0.max_problems=3",
                "-O", "benchmarks.1.max_problems=3", "-O", "benchmarks.2.max_problems=2", env=env)
    assert p.returncode == exit_codes.EVAL_FAILED, p.stderr[-3000:]
    warnings = [ln for ln in p.stderr.splitlines() if ln.startswith("warning: simpleqa cannot run")]
    assert len(warnings) == 1 and "graded by an LLM judge" in warnings[0]
    errors = error_lines(p.stdout, p.stderr)
    assert len(errors) == 1 and errors[0].startswith("error: simpleqa/nemotron: simpleqa is graded by an LLM judge")
    assert set(_results(p.stdout)) == {("gsm8k", "nemotron"), ("mmlu", "nemotron"), ("humaneval", "nemotron")}
    ck = json.loads((out / "checkpoint.json").read_text())
    assert [(f["name"], f["stage"]) for f in ck["failed_benchmarks"].values()] == [("simpleqa", "plan")]
    assert sorted(c["name"] for c in ck["completed_benchmarks"].values()) == ["gsm8k", "humaneval", "mmlu"]
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == 3 + 3 + 2  # none for simpleqa


def test_a_lone_benchmark_that_cannot_run_is_still_refused(tmp_path: Path, reference_server,
                                                          data_dir: Path) -> None:
    url = reference_server()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  m: {{url: {url}, model: m}}\n"
                   f"benchmarks:\n  - {{name: simpleqa, max_problems: 2}}\noutput:\n  dir: {tmp_path / 'out'}\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == exit_codes.USAGE
    assert p.stderr.strip().splitlines()[-1].startswith("error: simpleqa is graded by an LLM judge")
    assert not (tmp_path / "out").exists()
