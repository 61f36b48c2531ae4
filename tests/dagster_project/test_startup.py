"""What keeps `nel` quick to start (issue 17), checked as mechanisms, never as timings
(bench/bench_startup.py has the figures):

* `nel --help`, `nel list` and an unchanged rerun import neither Dagster nor pyarrow (nor
  numpy, aiohttp, polars, scipy), nor what only sending requests needs (the eval loop, the
  solvers, the model client: issue 32);
* `nel eval run` sends its first request before its Dagster run exists (the head start), and
  the Dagster record of the run is the record a run without the head start leaves: the same
  runs, materializations, partitions, metadata keys and data versions; a failed head start
  is a failed Dagster run, as before;
* the model's bundle, when that shard was its only stale one, is built before Dagster too
  (its memory gone before Dagster's imports arrive), and its run records it the same way; a
  bundle that fails there is a failed bundle run, as before;
* while that shard's requests are in flight (in a forked child), the `nel` process imports
  Dagster and opens its instance: that cost no longer follows the last request (issue 32).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from nel_resources.reference_server import start_reference_server
from tests.support.cli import nel_env, run_nel
from tests.support.reference import reset_server_stats, server_stats

HEAVY = ("dagster", "pyarrow", "polars", "scipy", "numpy", "aiohttp", "duckdb", "nel_resources.proxy.chain",
         # what only sending requests needs
         "nel_assets.engine.evaluation.loop", "nel_assets.engine.solvers.simple",
         "nel_assets.engine.solvers.loglikelihood", "nel_resources.model_client")
# Runs `nel ARGS` in a fresh interpreter and writes the exit status and which of HEAVY
# were imported by the end.
_PROBE = """
import json, sys
from dagster_project.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
json.dump({"code": code, "loaded": [m for m in HEAVY if m in sys.modules]}, open(sys.argv[1], "w"))
""".replace("HEAVY", repr(HEAVY))


def _probe(tmp: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = tmp / "probe.json"
    p = subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], capture_output=True, text=True,
                       env=nel_env(env), timeout=300)
    assert out.exists(), p.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_reference_server(default_content="Step by step.\n#### 42")
    try:
        yield url
    finally:
        proc.stop()


def _run(url: str, out: Path, data_dir: Path, *, head_start: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"NEL_DATA_DIR": str(data_dir), **({} if head_start else {"NEL_NO_HEAD_START": "1"})}
    return run_nel("eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", url, "--model-id", "m",
                   "-o", str(out), "--no-progress", env=env)


def _record(out: Path) -> dict[str, Any]:
    """The Dagster record of the runs in `out`: runs, and per (asset, partition) the
    materialization's metadata keys, values that do not depend on timing, and data version."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(out / ".dagster"))
    runs = {r.run_id: r for r in instance.get_runs()}
    mats: dict[tuple[str, str | None], dict[str, Any]] = {}
    for key in instance.get_asset_keys():
        for rec in instance.fetch_materializations(key, limit=100).records:
            m = rec.asset_materialization
            assert m is not None
            md = {k: v.value for k, v in m.metadata.items()}
            mats[(key.to_user_string(), m.partition)] = {
                "run_id": rec.run_id, "metadata_keys": sorted(md),
                "n_rows": md.get("n_rows"), "requests_sent": md.get("requests_sent"),
                "data_version": m.tags.get("dagster/data_version") if m.tags else None,
                "code_version": m.tags.get("dagster/code_version") if m.tags else None}
    observed = instance.fetch_observations(dg.AssetKey(["gsm8k", "shard_inputs"]), limit=10).records
    return {"instance": instance, "runs": runs, "mats": mats,
            "observed": sorted(str(o.partition_key) for o in observed)}


def test_help_and_list_import_no_heavy_package(tmp_path: Path, data_dir: Path) -> None:
    helped = _probe(tmp_path, "--help")
    assert helped == {"code": 0, "loaded": []}
    listed = _probe(tmp_path, "list", env={"NEL_DATA_DIR": str(data_dir)})
    assert listed == {"code": 0, "loaded": []}


def test_head_start_keeps_the_dagster_record(tmp_path: Path, server: str, data_dir: Path) -> None:
    reset_server_stats(server)
    p = _run(server, tmp_path / "head", data_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    stats = server_stats(server)
    first_request = stats["first_at"]["/v1/chat/completions"]
    assert stats["by_endpoint"]["/v1/chat/completions"] == 5

    head = _record(tmp_path / "head")
    shard = head["mats"][("gsm8k/shard_results", "m|0")]
    shard_run = head["runs"][shard["run_id"]]
    # The shard's requests went out before Dagster created the run that records them...
    created = head["instance"].get_run_record_by_id(shard_run.run_id).create_timestamp.timestamp()
    assert first_request < created
    # ...and that run recorded them: rows, requests, the run id in the rows, the data version.
    assert (shard["n_rows"], shard["requests_sent"]) == (5, 5)
    part = tmp_path / "head" / "gsm8k" / "shard_results" / "model=m" / "shard=0"
    assert set(pq.read_table(part / "part-0.parquet").column("run_id").to_pylist()) == {shard_run.run_id[:12]}
    assert shard["data_version"] == json.loads((part / "_fingerprint.json").read_text())["data_version"]
    assert head["observed"] == ["m|0"]
    assert {r.job_name for r in head["runs"].values()} == {"nel_gsm8k_shards", "nel_gsm8k_bundle"}
    assert all(r.is_success for r in head["runs"].values())
    # The bundle and its exports were written before Dagster created the run recording them.
    bundle_run = head["runs"][head["mats"][("gsm8k/bundle", "m")]["run_id"]]
    bundle_created = head["instance"].get_run_record_by_id(bundle_run.run_id).create_timestamp.timestamp()
    bundle_file = tmp_path / "head" / "gsm8k" / "bundle" / "model=m" / "bundle.json"
    assert bundle_file.stat().st_mtime < created < bundle_created
    assert (tmp_path / "head" / "gsm8k" / "results.jsonl").stat().st_mtime < created

    # The same run without the head start (Dagster first) leaves the same record.
    reset_server_stats(server)
    p = _run(server, tmp_path / "plain", data_dir, head_start=False)
    assert p.returncode == 0, p.stderr[-2000:]
    plain = _record(tmp_path / "plain")
    assert head["observed"] == plain["observed"]
    assert sorted(r.job_name for r in head["runs"].values()) == sorted(r.job_name for r in plain["runs"].values())
    assert head["mats"].keys() == plain["mats"].keys() == {
        ("gsm8k/dataset", "0"), ("gsm8k/shard_results", "m|0"), ("gsm8k/bundle", "m"), ("gsm8k/report", "m")}
    for key, mat in head["mats"].items():
        other = plain["mats"][key]
        assert {k: v for k, v in mat.items() if k != "run_id"} == {k: v for k, v in other.items() if k != "run_id"}, key


def test_failed_head_start_is_a_failed_dagster_run(tmp_path: Path, data_dir: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    head = _run(dead, tmp_path / "head", data_dir)
    plain = _run(dead, tmp_path / "plain", data_dir, head_start=False)
    assert head.returncode == plain.returncode != 0
    def errors(p: subprocess.CompletedProcess[str], out: Path) -> list[str]:
        return [ln.replace(str(out), "OUT") for ln in p.stderr.splitlines() if ln.startswith("error")]

    assert errors(head, tmp_path / "head") == errors(plain, tmp_path / "plain") != [], head.stderr
    # The failed shard's run fails at its shard step (the dataset partition is recorded
    # before it, outside any run, so its write cannot hide the shard's own error).
    runs = list(_record(tmp_path / "head")["runs"].values())
    assert [(r.job_name, r.tags.get("dagster/partition"), r.is_failure) for r in runs] == [
        ("nel_gsm8k_shards", "m|0", True)]


def test_failed_head_start_bundle_is_a_failed_bundle_run(tmp_path: Path, server: str, data_dir: Path) -> None:
    # results.jsonl cannot be replaced when a directory holding a file sits at its path.
    for side in ("head", "plain"):
        blocker = tmp_path / side / "gsm8k" / "results.jsonl"
        blocker.mkdir(parents=True)
        (blocker / "keep").write_text("x")
    head = _run(server, tmp_path / "head", data_dir)
    plain = _run(server, tmp_path / "plain", data_dir, head_start=False)
    assert head.returncode == plain.returncode != 0

    def errors(p: subprocess.CompletedProcess[str], out: Path) -> list[str]:
        # (the temp file's name carries the writer's pid)
        return [re.sub(r"\.tmp\d+", ".tmpPID", ln.replace(str(out), "OUT"))
                for ln in p.stderr.splitlines() if ln.startswith("error")]

    assert errors(head, tmp_path / "head") == errors(plain, tmp_path / "plain") != [], head.stderr
    assert "results.jsonl" in "\n".join(errors(head, tmp_path / "head"))
    for side in ("head", "plain"):
        runs = sorted(_record(tmp_path / side)["runs"].values(), key=lambda r: r.job_name)
        assert [(r.job_name, r.is_success) for r in runs] == [
            ("nel_gsm8k_bundle", False), ("nel_gsm8k_shards", True)], side


def test_plain_http_run_never_imports_aiohttp(tmp_path: Path, server: str, data_dir: Path) -> None:
    # A plain-HTTP endpoint is served by the raw client: aiohttp (HTTPS, proxies) stays out.
    # (the shard in this process, not in a forked child whose imports the probe cannot see)
    run = _probe(tmp_path, "eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", server, "--model-id", "m",
                 "-o", str(tmp_path / "out"), "--no-progress",
                 env={"NEL_DATA_DIR": str(data_dir), "NEL_HEAD_START_INLINE": "1"})
    assert run["code"] == 0
    assert "dagster" in run["loaded"] and "aiohttp" not in run["loaded"], run
    assert "nel_resources.model_client" in run["loaded"], run  # the shard did run here


def test_unchanged_rerun_imports_neither_dagster_nor_pyarrow(tmp_path: Path, server: str, data_dir: Path) -> None:
    p = _run(server, tmp_path / "out", data_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    reset_server_stats(server)
    rerun = _probe(tmp_path, "eval", "run", "-b", "gsm8k", "-m", "5", "--model-url", server, "--model-id", "m",
                   "-o", str(tmp_path / "out"), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert rerun == {"code": 0, "loaded": []}
    assert server_stats(server)["total_requests"] == 0


def test_dagster_instance_opens_while_the_head_start_shard_is_in_flight(tmp_path: Path, data_dir: Path) -> None:
    # A model server that holds every answer until the run's Dagster instance exists (its run
    # storage, created when the instance opens), within a bound that only matters when it
    # never does: nel used to open the instance only after the shard's last answer.
    from http.server import ThreadingHTTPServer

    from tests.support.recording_server import make_handler
    from tests.support.waiting import wait_for

    out = tmp_path / "out"
    runs_db = out / ".dagster" / "history" / "runs.db"
    answered: list[bool] = []
    base = make_handler(tmp_path / "requests.jsonl")

    class Holding(base):  # type: ignore[misc,valid-type]
        def do_POST(self) -> None:
            if self.path.endswith("/chat/completions"):
                try:
                    wait_for(lambda: runs_db.exists() or None, timeout=30, interval=0.02,
                             what="the Dagster instance")
                    answered.append(True)
                except AssertionError:
                    answered.append(False)
            super().do_POST()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Holding)
    import threading

    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        p = _run(url, out, data_dir)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert p.returncode == 0, p.stderr[-2000:]
    assert answered == [True] * 5, answered  # every answer waited for the instance, none timed out
    runs = _record(out)["runs"]
    assert {r.job_name for r in runs.values()} == {"nel_gsm8k_shards", "nel_gsm8k_bundle"}
    assert all(r.is_success for r in runs.values())
