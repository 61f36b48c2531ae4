"""`nel eval run` returns before Dagster's recording of a plain run, which a process of its own
finishes (dagster_project.background_recording): the records equal those of a run that
records in the command, nel commands that read the instance see them, the next run on the
directory waits for the recording instead of refusing, a Ctrl-C after the command
returned does not cut it short, and a recording killed mid-way is done by the next run.

Real `nel eval run` processes against the reference server, a real Dagster instance.
The suite runs with NEL_RECORD_INLINE=1 (tests/conftest.py); these tests unset it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from benchmarks.datasets import load_file
from dagster_project.output_lock import LOCK_NAME, OutputLock, mark_recording
from dagster_project.record_repair import PENDING_FILE
from tests.support.cli import REPO_ROOT, nel_env, run_nel, summary_json
from tests.support.gsm8k import answers_for

N = 24
LATER = {"unset": ["NEL_RECORD_INLINE"]}


@pytest.fixture(scope="module")
def answers(data_dir: Path) -> list[dict]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    return answers_for(rows, set(range(0, N, 3)))


def _args(url: str, out: Path, n: int = N) -> list[str]:
    return ["eval", "run", "--bench", "gsm8k", "-m", str(n), "--model-url", url, "--model-id", "m",
            "-o", str(out), "--no-progress", "--json"]


def _records(out: Path) -> dict[str, Any]:
    """What the instance of `out` holds, without run ids: each run's job and status, and the
    shard, bundle and dataset materializations (partition, data version, the metadata the
    runner reads). Opened through nel's `open_instance`, which waits for a recording."""
    import dagster as dg

    from dagster_project.instance_config import open_instance

    instance = open_instance(out / ".dagster")
    runs = sorted((r.job_name, r.status.value) for r in instance.get_runs())
    mats = {}
    for name in ("shard_results", "bundle", "dataset"):
        ev = instance.get_latest_materialization_event(dg.AssetKey(["gsm8k", name]))
        assert ev is not None, f"no {name} materialization recorded"
        m = ev.asset_materialization
        md = {k: v.value for k, v in m.metadata.items()
              if k in ("n_rows", "requests_sent", "n_errors", "mean_reward", "score", "n_items", "n_problems")}
        mats[name] = (m.partition, m.tags.get("dagster/data_version"), md)
    return {"runs": runs, "materializations": mats, "run_ids": [r.run_id for r in instance.get_runs()]}


def _result(s: dict[str, Any]) -> tuple:
    (r,) = s["results"]
    return s["shards_run"], s["requests_sent"], r["score"], r["n_items"]


def test_a_plain_run_returns_first_and_its_records_equal_an_inline_run(
        tmp_path: Path, reference_server, answers, data_dir: Path) -> None:
    url = reference_server(answers=answers)
    env = {"NEL_DATA_DIR": str(data_dir)}
    inline, later = tmp_path / "inline", tmp_path / "later"
    s_inline = summary_json(run_nel(*_args(url, inline), env=env))
    s_later = summary_json(run_nel(*_args(url, later), env=env, **LATER))
    assert _result(s_later) == _result(s_inline) == (1, N, pytest.approx(8 / N), N)

    # The run left its recording to a process of its own (it marked the run lock so) ...
    assert (later / LOCK_NAME).read_text().endswith(" recording\n")
    assert not (inline / LOCK_NAME).read_text().endswith(" recording\n")
    # ... whose records, read as soon as the command returned, equal the inline run's.
    rec_later, rec_inline = _records(later), _records(inline)
    assert rec_later["runs"] == rec_inline["runs"] == [("nel_gsm8k_bundle", "SUCCESS"),
                                                        ("nel_gsm8k_shards", "SUCCESS")]
    assert rec_later["materializations"] == rec_inline["materializations"]
    # The shard's run is the one whose id the rows carry (chosen before the evaluation).
    rows = pq.read_table(later / "gsm8k" / "shard_results" / "model=m" / "shard=0" / "part-0.parquet")
    assert {r[:12] for r in rec_later["run_ids"]} >= set(rows.column("run_id").to_pylist())
    log = (later / "logs" / "nel-run.log").read_text()
    assert "recording the run in Dagster failed" not in log


def test_the_next_run_waits_for_the_recording_and_both_are_recorded(
        tmp_path: Path, reference_server, answers, data_dir: Path) -> None:
    url = reference_server(answers=answers)
    env = {"NEL_DATA_DIR": str(data_dir)}
    out = tmp_path / "out"
    first = summary_json(run_nel(*_args(url, out, n=N // 2), env=env, **LATER))
    assert first["shards_run"] == 1
    # At once, a run with more problems (its shard is stale): it must not refuse the
    # directory as busy while the first run's recording holds the lock.
    second = run_nel(*_args(url, out), env=env, **LATER)
    assert second.returncode == 0, second.stderr
    assert "in use by another nel run" not in second.stderr
    assert summary_json(second)["shards_run"] == 1
    assert _records(out)["runs"] == [("nel_gsm8k_bundle", "SUCCESS")] * 2 + [("nel_gsm8k_shards", "SUCCESS")] * 2


def test_ctrl_c_after_the_command_returned_does_not_cut_the_recording(
        tmp_path: Path, reference_server, answers, data_dir: Path) -> None:
    url = reference_server(answers=answers)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *_args(url, out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            env=nel_env({"NEL_DATA_DIR": str(data_dir)}, ["NEL_RECORD_INLINE"]),
                            start_new_session=True)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    # The terminal's Ctrl-C goes to the command's process group; the recording has its own.
    with contextlib.suppress(ProcessLookupError):  # none of the group is left: the recording is not in it
        os.killpg(proc.pid, signal.SIGINT)
    assert _records(out)["runs"] == [("nel_gsm8k_bundle", "SUCCESS"), ("nel_gsm8k_shards", "SUCCESS")]
    assert "recording the run in Dagster failed" not in (out / "logs" / "nel-run.log").read_text()


def test_a_lock_held_by_a_recording_is_waited_for_not_refused(tmp_path: Path) -> None:
    out, ended = tmp_path / "out", tmp_path / "recording-ended"
    out.mkdir()
    held = OutputLock()
    held.acquire(out)
    mark_recording(held.fileno())
    pid = os.fork()
    if pid == 0:  # the recording: holds the lock a moment, says it is done, then ends
        time.sleep(0.5)
        ended.touch()
        os._exit(0)
    held.release()  # the child's copy keeps it, as a detached recording's does
    nxt = OutputLock(wait=False)
    try:
        nxt.acquire(out)  # waits; a run's lock (not a recording's) would raise OutputBusyError
        assert ended.exists()  # it came free only when the recording ended
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    finally:
        nxt.release()
        os.waitpid(pid, 0)


def test_a_recording_cut_short_is_done_by_the_next_run(
        tmp_path: Path, reference_server, server_stats, answers, data_dir: Path) -> None:
    url = reference_server(answers=answers)
    env = {"NEL_DATA_DIR": str(data_dir)}
    out = tmp_path / "out"
    first = summary_json(run_nel(*_args(url, out), env=env, **LATER))
    # The recording process (its pid is in the run lock) is killed at once, as by a crash.
    pid = int((out / LOCK_NAME).read_text().split()[0])
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pytest.fail("the recording had already finished: nothing was cut short")
    assert (out / PENDING_FILE).exists()
    sent = server_stats(url)["by_endpoint"]["/v1/chat/completions"]
    # The next run (nothing to evaluate) records the shard and the bundle, sending nothing.
    again = summary_json(run_nel(*_args(url, out), env=env))
    assert again["requests_sent"] == 0 and server_stats(url)["by_endpoint"]["/v1/chat/completions"] == sent
    assert _result(again)[2:] == _result(first)[2:]
    assert not (out / PENDING_FILE).exists()
    rec = _records(out)
    assert ("nel_gsm8k_shards", "SUCCESS") in rec["runs"] and ("nel_gsm8k_bundle", "SUCCESS") in rec["runs"]
    partition, version, md = rec["materializations"]["shard_results"]
    assert partition == "m|0" and md["n_rows"] == N and md["requests_sent"] == N
    stored = json.loads((out / "gsm8k" / "shard_results" / "model=m" / "shard=0" / "_fingerprint.json").read_text())
    assert version == stored["data_version"]
    assert rec["materializations"]["dataset"][0] == "0"
    assert "recorded gsm8k m shard 0 in Dagster" in (out / "logs" / "nel-run.log").read_text()
