"""`nel eval run` after crashes, torn artifacts, a full disk, SIGKILLs and failed requests,
against the reference server (its /stats say exactly which prompts were asked)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from nel_assets.engine.evaluation.evaluate import artifact_problems, plan
from nel_resources.config import load_config
from nel_resources.specs import resolve
from nel_resources.storage.store import ResultStore
from tests.support.cli import run_nel, start_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.tmpfs import fill, small_tmpfs
from tests.support.waiting import wait_while_running

CHAT = "/v1/chat/completions"


def _chat_requests(stats: dict) -> int:
    return int(stats["by_endpoint"].get(CHAT, 0))


def test_missing_or_torn_artifacts_are_rebuilt_from_the_store_without_requests(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server()
    out = tmp_path / "out"
    args = ["eval", "run", "-b", "gsm8k", "-m", "20", "--model-url", url, "--model-id", "m",
            "-o", str(out), "--json", "--no-progress"]
    env = {"NEL_DATA_DIR": str(data_dir)}
    summary_json(run_nel(*args, env=env))
    store = ResultStore(out)
    assert artifact_problems(store, "gsm8k", "m") == []
    exp = store.export_dir("gsm8k", "m")
    bdir = store.bundle_dir("gsm8k", "m")
    (eval_json,) = exp.glob("eval-*.json")
    # the bundle file's name carries the time it was built, so it is found again after each
    # rebuild (NeMo Evaluator's eval-<ts>-<bench>.json)
    eval_metrics = json.loads(eval_json.read_bytes())["metrics"]
    originals = {p: p.read_bytes() for p in (exp / "results.jsonl", exp / "trajectories.jsonl",
                                             bdir / "bundle.json")}
    sent = _chat_requests(server_stats(url))

    damage = {
        # a crash after the bundle, before the exports (what the drill saw)
        "exports lost": lambda: [*(p.unlink() for p in exp.glob("eval-*.json")),
                                 (exp / "results.jsonl").unlink(), (exp / "runtime_stats.json").unlink()],
        "results.jsonl deleted by hand": lambda: (exp / "results.jsonl").unlink(),
        "trajectories torn": lambda: (exp / "trajectories.jsonl").write_bytes(
            originals[exp / "trajectories.jsonl"][:-300]),
        "results short by a line": lambda: (exp / "results.jsonl").write_bytes(
            b"\n".join(originals[exp / "results.jsonl"].split(b"\n")[1:])),
        "bundle.json torn": lambda: (bdir / "bundle.json").write_bytes(originals[bdir / "bundle.json"][:50]),
        "bundle.parquet torn": lambda: (bdir / "bundle.parquet").write_bytes(b"PAR1 not really"),
        "report missing": lambda: (store.report_dir("gsm8k", "m") / "report.md").unlink(),
        "runtime stats torn": lambda: (exp / "runtime_stats.json").write_text('{"latency_ms": {'),
        "bundle of an older nel": lambda: (bdir / "bundle.json").write_bytes(orjson.dumps(
            {**json.loads(originals[bdir / "bundle.json"]), "bundle_version": 1})),
    }
    for what, harm in damage.items():
        harm()
        problems = artifact_problems(store, "gsm8k", "m")
        assert problems, f"{what}: not detected"
        s = summary_json(run_nel(*args, env=env))
        assert s["shards_run"] == 0 and s["requests_sent"] == 0, what
        assert s["artifacts_rebuilt"] == {"gsm8k/m": problems}, what
        assert artifact_problems(store, "gsm8k", "m") == [], what
        for p, data in originals.items():
            if p.suffix == ".jsonl":
                assert p.read_bytes() == data, f"{what}: {p.name} differs after the rebuild"
            else:  # the bundle records when it was built
                assert json.loads(p.read_bytes())["score"] == json.loads(data)["score"], what
        (ev,) = exp.glob("eval-*.json")
        assert json.loads(ev.read_bytes())["metrics"] == eval_metrics, what
    assert _chat_requests(server_stats(url)) == sent  # no model request for any rebuild
    # and an intact output is left alone: no Dagster run at all
    s = summary_json(run_nel(*args, env=env))
    assert s["dagster_runs"] == 0 and s["artifacts_rebuilt"] == {}
    assert not list(exp.glob(".*.tmp*"))


def test_a_rerun_retries_the_failed_samples_and_only_those(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    n = 40
    # ~30% of prompts fail their first 2 attempts; with 1 retry they end as errors, and a
    # rerun's attempt (the 3rd) succeeds. Every other reply is a wrong answer (a scored
    # failure), which must not be retried.
    url = reference_server(fail_rate=0.3, fail_status=500, fail_attempts=2)
    out = tmp_path / "out"
    args = ["eval", "run", "-b", "gsm8k", "-m", str(n), "--model-url", url,
            "-o", str(out), "--json", "--no-progress", "-O", "services.default.max_retries=1",
            "-O", "services.default.retry_backoff=0.01"]
    env = {"NEL_DATA_DIR": str(data_dir)}
    s1 = summary_json(run_nel(*args, env=env))
    part = out / "gsm8k" / "shard_results" / "model=default" / "shard=0" / "part-0.parquet"
    first = {r["sample_id"]: r for r in pq.read_table(part).to_pylist()}
    failed = {sid for sid, r in first.items() if r["error"] is not None}
    assert 0 < len(failed) < n and s1["results"][0]["failed"] == len(failed)
    wrong = {sid for sid, r in first.items() if r["error"] is None and r["reward"] == 0.0}
    assert wrong, "the reference server's default replies should be scored failures"
    before = dict(server_stats(url)["prompts"])

    cfg = load_config(out / "nel-config.yaml")
    (task,) = plan(ResultStore(out), resolve(cfg).benchmarks[0])
    assert task.stale and task.reason == f"{len(failed)} failed samples to retry"

    s2 = summary_json(run_nel(*args, env=env))
    assert s2["shards_run"] == 1 and s2["requests_sent"] == len(failed)
    assert s2["shards_run_because"] == {"gsm8k/default/0": f"{len(failed)} failed samples to retry"}
    after = server_stats(url)["prompts"]
    asked = {p for p, c in after.items() if c > before.get(p, 0)}
    failed_prompts = {p for p in before for sid in failed if first[sid]["prompt"] in p}
    assert asked == failed_prompts and all(after[p] == before[p] + 1 for p in asked)
    second = {r["sample_id"]: r for r in pq.read_table(part).to_pylist()}
    assert set(second) == set(first) and not any(r["error"] for r in second.values())
    for sid in set(first) - failed:  # kept as they were, not re-requested
        assert second[sid]["run_id"] == first[sid]["run_id"]
        assert second[sid]["response"] == first[sid]["response"]
    assert all(second[sid]["run_id"] != first[sid]["run_id"] for sid in failed)
    assert s2["results"][0]["failed"] == 0

    s3 = summary_json(run_nel(*args, env=env))
    assert s3["shards_run"] == 0 and s3["requests_sent"] == 0


def test_full_disk_stops_sending_and_keeps_what_was_journaled(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    n, conc = 400, 4
    # 50 ms an answer: ~4 s after the 50th journaled sample for the disk to fill before the
    # run could end on its own (`sent < n` below), even on a busy machine.
    url = reference_server(delay_ms=50)
    with small_tmpfs(tmp_path / "disk", size="2m") as disk:
        out = disk / "out"
        args = ["eval", "run", "-b", "gsm8k", "-m", str(n), "--model-url", url, "--model-id", "m",
                "-o", str(out), "--no-progress", "--max-concurrent", str(conc),
                # the Dagster home is elsewhere: this test is about the journal's disk
                "-O", f"output.dagster_home={tmp_path / 'home'}"]
        env = {"NEL_DATA_DIR": str(data_dir)}
        log = tmp_path / "run.log"
        jdir = out / "gsm8k" / "_journal" / "model=m" / "shard=0"

        def journaled() -> int:
            files = list(jdir.glob("*.jsonl")) if jdir.exists() else []
            return files[0].read_bytes().count(b"\n") if files else 0

        proc = start_nel(*args, env=env, log=log)
        try:
            wait_while_running(lambda: journaled() >= 50, proc=proc, what="50 journaled samples", log=log)
            fill(disk / "filler")
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        text = log.read_text()
        kept = journaled()
        sent = _chat_requests(server_stats(url))
        assert proc.returncode != 0, text
        # one line for the journal's failure (the checkpoint on the same full disk may add its own)
        error_lines(text, "")  # no traceback, no Dagster log line (stdout and stderr share the log)
        errors = [x for x in text.splitlines() if x.startswith("error:")]
        (line,) = [x for x in errors if "cannot write the journal " in x]
        assert line.startswith("error: gsm8k/m: cannot write the journal "), errors
        assert "No space left on device (28)" in line, errors
        assert all("cannot write the journal" in e or "checkpoint.json" in e for e in errors), errors
        assert f"{kept} samples kept" in line
        # sending stopped at once: beyond what was kept, only requests in flight when the
        # write failed (plus the rows of the failing write) were answered and lost
        assert kept >= 50 and sent - kept <= 2 * conc, (sent, kept)
        assert sent < n

        (disk / "filler").unlink()
        s = summary_json(run_nel(*args, "--json", env=env))
        assert s["requests_sent"] == n - kept  # the rerun continues from the journal
        assert s["results"][0]["n_samples"] + s["results"][0]["failed"] == n


def test_sigkills_never_rerequest_a_finished_sample(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    """Kill a real `nel eval run` several times mid-shard, at moments chosen by the server's
    request count (independent of when the journal syncs). After each resume, the only
    prompts asked again are requests that were still in flight at the kill: at most the
    run's concurrency."""
    n, conc, kills = 300, 4, 4
    url = reference_server(delay_ms=20)
    out = tmp_path / "out"
    args = ["eval", "run", "-b", "gsm8k", "-m", str(n), "--model-url", url, "--model-id", "m",
            "-o", str(out), "--no-progress", "--max-concurrent", str(conc), "--json"]
    env = {"NEL_DATA_DIR": str(data_dir)}
    seen: dict[str, int] = {}
    reasked: list[int] = []
    for k in range(kills):
        log = tmp_path / f"run{k}.log"
        target = _chat_requests(server_stats(url)) + 40
        proc = start_nel(*args, env=env, log=log)
        try:
            wait_while_running(lambda t=target: _chat_requests(server_stats(url)) >= t, proc=proc,
                               what=f"run {k} reaching {target} requests", log=log)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        prompts = server_stats(url)["prompts"]
        # prompts asked in this run that an earlier run had asked already
        reasked.append(sum(min(c, c - seen.get(p, 0)) for p, c in prompts.items() if seen.get(p)))
        seen = dict(prompts)
    s = summary_json(run_nel(*args, env=env))
    prompts = server_stats(url)["prompts"]
    reasked.append(sum(c - seen.get(p, 0) for p, c in prompts.items() if seen.get(p)))
    assert len(prompts) == n and s["results"][0]["n_samples"] == n
    # run k+1 re-asks only what was in flight when run k died
    assert all(r <= conc for r in reasked[1:]), reasked
    assert sum(prompts.values()) - n <= kills * conc
