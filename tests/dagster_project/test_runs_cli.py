"""`nel eval status | stop | logs | jobs | clean | resume` on real runs: a real `nel eval run`
against the reference server, its real Dagster instance, real signals; and the same
invocations through the real NeMo Evaluator 0.3.0 where both can run them."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import dagster as dg
import pytest

from tests.support.cli import run_nel, start_nel, summary_json
from tests.support.peers import run_peer_nemo
from tests.support.waiting import wait_for, wait_while_running

CHAT = "/v1/chat/completions"


def _chat_requests(stats: dict) -> int:
    return int(stats["by_endpoint"].get(CHAT, 0))


def _env(tmp_path: Path, data_dir: Path | None = None) -> dict[str, str]:
    env = {"NEL_RUNS_DIR": str(tmp_path / "runs-index")}
    if data_dir is not None:
        env["NEL_DATA_DIR"] = str(data_dir)
    return env


def _run_id(out: Path) -> str:
    return json.loads((out / "nel_run.json").read_text())["run_id"]


def _field(status_stdout: str, name: str) -> str:
    for line in status_stdout.splitlines():
        if line.strip().startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name!r} in:\n{status_stdout}")


def _dagster_statuses(home: Path, run_id: str) -> list[str]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"nel/run_id": run_id}))
        return [r.status.value for r in runs]


def test_status_logs_jobs_and_clean_of_finished_runs(tmp_path: Path, reference_server, data_dir: Path) -> None:
    url = reference_server()
    env = _env(tmp_path, data_dir)
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        summary_json(run_nel("eval", "run", "-b", "gsm8k", "-m", "4", "--model-url", url, "--model-id", "m",
                             "-o", str(out), "--no-progress", "--json", env=env))
    ids = [_run_id(o) for o in outs]
    assert ids[0] != ids[1]

    st = run_nel("eval", "status", "-r", ids[0], env=env)
    assert st.returncode == 0, st.stderr
    assert _field(st.stdout, "Run") == ids[0] and _field(st.stdout, "state") == "completed"
    assert _field(st.stdout, "Running") == "False" and _field(st.stdout, "exit_status") == "0"
    # the Dagster runs the eval launched, read from its instance
    statuses = _dagster_statuses(outs[0] / ".dagster", ids[0])
    assert statuses and set(statuses) == {"SUCCESS"}
    assert _field(st.stdout, "dagster_runs") == f"{len(statuses)} (SUCCESS {len(statuses)})"
    by_dir = run_nel("eval", "status", "-o", str(outs[1]), env=env)
    assert _field(by_dir.stdout, "Run") == ids[1]
    # `eval report -r ID` reports that run's directory, the same report as naming it
    by_id = run_nel("eval", "report", "-r", ids[1], "-f", "csv", env=env)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == run_nel("eval", "report", str(outs[1]), "-f", "csv", env=env).stdout
    assert "gsm8k" in by_id.stdout

    logs = run_nel("eval", "logs", "-r", ids[0], env=env)
    assert logs.returncode == 0
    assert f"nel run {ids[0]}" in logs.stdout and "# Dagster event log" in logs.stdout
    assert logs.stdout.count("PIPELINE_SUCCESS") == len(statuses)
    tail = run_nel("eval", "logs", "-r", ids[0], "-n", "3", env=env)
    assert tail.stdout.splitlines() == logs.stdout.splitlines()[-3:]
    shard0 = run_nel("eval", "logs", "-r", ids[0], "-s", "0", env=env)
    assert "STEP_SUCCESS" in shard0.stdout and "nel_bundle" not in shard0.stdout

    jobs = run_nel("eval", "jobs", env=env)
    rows = [line.split() for line in jobs.stdout.splitlines()[2:]]
    assert [r[0] for r in rows] == sorted(ids, reverse=True)
    assert all(r[1] == "local" and r[2] == "completed" and r[3] == "gsm8k" for r in rows)
    assert run_nel("eval", "jobs", "--offline", env=env).stdout.splitlines()[2].split()[2] == "\u2014"

    dry = run_nel("eval", "clean", "--dry-run", env=env)
    assert dry.returncode == 0 and "Found 2 entries" in dry.stdout and "nothing removed" in dry.stdout
    no = run_nel("eval", "clean", "--older-than", "1h", env=env)  # both are minutes old
    assert no.returncode == 0 and no.stdout.strip() == "Nothing to clean."
    bad = run_nel("eval", "clean", "--older-than", "soon", env=env)
    assert bad.returncode == 1 and "Invalid duration" in bad.stderr
    # without --yes and no answer on stdin: nothing is removed
    refused = run_nel("eval", "clean", env=env)
    assert refused.returncode == 1 and "Aborted!" in refused.stderr
    assert len(run_nel("eval", "jobs", env=env).stdout.splitlines()) == 4
    done = run_nel("eval", "clean", "--yes", env=env)
    assert done.returncode == 0 and "Removed 2 entries." in done.stdout
    assert run_nel("eval", "jobs", env=env).stdout.strip() == "No tracked runs."
    # only the index entries went: the results, the record in the output dir and the
    # Dagster instance are where they were, and `-o` still finds the run
    for out in outs:
        assert (out / "gsm8k").is_dir() and (out / "nel_run.json").is_file()
    assert _field(run_nel("eval", "status", "-o", str(outs[0]), env=env).stdout, "state") == "completed"


@pytest.mark.parametrize("head_start", [True, False], ids=["head-start", "dagster-first"])
def test_stop_ends_a_running_run_and_status_says_so(tmp_path: Path, reference_server, server_stats,
                                                     data_dir: Path, head_start: bool) -> None:
    url = reference_server(delay_ms=500)
    env = _env(tmp_path, data_dir)
    if not head_start:
        env["NEL_NO_HEAD_START"] = "1"
    out = tmp_path / "out"
    log = tmp_path / "run.log"
    proc = start_nel("eval", "run", "-b", "gsm8k", "-m", "200", "--model-url", url, "--model-id", "m",
                     "-o", str(out), "--no-progress", "--max-concurrent", "1", env=env, log=log)
    try:
        wait_while_running(lambda: _chat_requests(server_stats(url)) >= 2, proc=proc,
                           what="the run's first requests", log=log)
        run_id = _run_id(out)
        st = run_nel("eval", "status", "-r", run_id, env=env)
        assert _field(st.stdout, "state") == "running" and _field(st.stdout, "Running") == "True"
        assert _field(st.stdout, "pid") == str(proc.pid)

        stop = run_nel("eval", "stop", "-r", run_id, env=env)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.strip() == f"Stopped run {run_id} (local)"
        # `stop` returns once the process is gone: it ended on SIGTERM as on Ctrl-C
        assert wait_for(lambda: proc.poll() is not None, timeout=30, what="nel eval run to end")
        assert proc.returncode == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    sent = _chat_requests(server_stats(url))
    assert sent < 200
    st = run_nel("eval", "status", "-r", run_id, env=env)
    assert _field(st.stdout, "state") == "stopped" and _field(st.stdout, "Running") == "False"
    statuses = _dagster_statuses(out / ".dagster", run_id)
    if head_start:
        # stopped inside the head start (the first shard runs before Dagster is imported):
        # no Dagster run was made, so none is left behind as started
        assert statuses == []
    else:
        assert statuses and not {"STARTED", "STARTING", "NOT_STARTED", "QUEUED"} & set(statuses)
    again = run_nel("eval", "stop", "-r", run_id, env=env)
    assert again.returncode == 0 and "Could not stop (may already be finished)." in again.stderr
    # no further request arrives after the stop
    assert _chat_requests(server_stats(url)) == sent


def test_resume_after_sigkill_redoes_only_what_is_missing(tmp_path: Path, reference_server, server_stats,
                                                          data_dir: Path) -> None:
    n, conc = 120, 4
    url = reference_server(delay_ms=20)
    env = _env(tmp_path, data_dir)
    out = tmp_path / "out"
    log = tmp_path / "run.log"
    proc = start_nel("eval", "run", "-b", "gsm8k", "-m", str(n), "--shards", "3", "--model-url", url,
                     "--model-id", "m", "-o", str(out), "--no-progress", "--max-concurrent", str(conc),
                     env=env, log=log)
    try:
        # past the first shard (40 problems) and into the second
        wait_while_running(lambda: _chat_requests(server_stats(url)) >= 60, proc=proc,
                           what="60 requests", log=log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = _chat_requests(server_stats(url))
    run_id = _run_id(out)
    st = run_nel("eval", "status", "-r", run_id, env=env)
    assert _field(st.stdout, "state") == "interrupted"
    assert _field(st.stdout, "resume") == f"nel eval resume -r {run_id}"
    # the killed process left the Dagster run of the shard it was in "started"
    assert "STARTED" in _dagster_statuses(out / ".dagster", run_id)

    res = run_nel("eval", "resume", "-r", run_id, "--json", env=env)
    s = summary_json(res)
    assert f"Resuming run {run_id} (local)" in res.stderr
    asked = _chat_requests(server_stats(url)) - before
    # the finished shard and every journaled sample are kept: only the rest is asked
    # (plus at most the requests in flight at the kill)
    assert asked == s["requests_sent"]
    assert n - before <= asked <= n - before + conc
    assert s["shards_run"] == 2 and s["shards_fresh"] == 1
    assert s["results"][0]["n_samples"] == n
    # ... and resume marked it canceled: nothing shows as running forever in the UI
    old = _dagster_statuses(out / ".dagster", run_id)
    assert "CANCELED" in old and "STARTED" not in old
    new_id = _run_id(out)
    assert new_id != run_id
    assert _field(run_nel("eval", "status", "-r", new_id, env=env).stdout, "state") == "completed"
    # the killed run stays "interrupted": the checkpoint written later is the resume's
    assert _field(run_nel("eval", "status", "-r", run_id, env=env).stdout, "state") == "interrupted"


def test_flags_nel_has_no_feature_for_are_refused(tmp_path: Path, reference_server, data_dir: Path) -> None:
    url = reference_server()
    env = _env(tmp_path, data_dir)
    out = tmp_path / "out"
    summary_json(run_nel("eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", url, "--model-id", "m",
                         "-o", str(out), "--no-progress", "--json", env=env))
    rid = _run_id(out)
    for args, key in ((["resume", "-r", rid, "--continue-attempts"], "--continue-attempts"),
                      (["resume", "-r", rid, "-s", "1"], "--shard")):
        p = run_nel("eval", *args, env=env)
        assert p.returncode == 2 and key in p.stderr and "not supported yet in nel" in p.stderr
        assert p.stderr.count("\n") == 1
    p = run_nel("eval", "stop", "-r", rid, "-s", "0", env=env)
    assert p.returncode == 1 and p.stderr.strip() == "Error: --shard is only supported for SLURM runs."


def test_same_invocations_same_exit_statuses_as_nemo_evaluator(tmp_path: Path) -> None:
    """Both tools, each with an empty run store and HOME, given the same invocations."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
           "NEL_RUNS_DIR": str(tmp_path / "runs-index")}
    cases = [
        (["eval", "status", "-r", "20260101_000000_deadbeef"], 1, "No run metadata found for run-id=20260101_000000_deadbeef."),
        (["eval", "status"], 1, "No evaluation metadata found. Use -r <run_id> or -o <dir>."),
        (["eval", "stop", "-o", str(tmp_path / "nowhere")], 1, None),
        (["eval", "logs", "-r", "nope"], 1, "No run metadata found for run-id=nope."),
        (["eval", "resume", "-r", "nope"], 1, "No run metadata found for run-id=nope."),
        (["eval", "jobs"], 0, None),
        (["eval", "jobs", "--offline"], 0, None),
        (["eval", "clean", "--yes"], 0, None),
        (["eval", "status", "--watch", "--bogus"], 2, None),
    ]
    for args, status, message in cases:
        ours = run_nel(*args, env=env, cwd=tmp_path)
        theirs = run_peer_nemo(*args, env=env, cwd=tmp_path)
        assert theirs.returncode == status, (args, theirs.stderr)
        assert ours.returncode == status, (args, ours.stdout, ours.stderr)
        assert ours.stdout == theirs.stdout, args
        if message is not None:
            assert ours.stderr.strip() == theirs.stderr.strip() == f"Error: {message}"
        assert "Traceback" not in ours.stderr


def test_help_of_the_new_commands_imports_no_dagster() -> None:
    import subprocess
    import sys

    from tests.support.cli import nel_env

    for args in (["--help"], ["eval", "status", "--help"], ["package", "--help"], ["export", "--help"]):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "dagster_project.cli.main", *args],
                           capture_output=True, text=True, env=nel_env())
        assert p.returncode == 0, p.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line}
        assert "dagster" not in imported and "docker" not in " ".join(imported), args
