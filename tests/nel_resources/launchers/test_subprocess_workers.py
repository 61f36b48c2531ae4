"""`cluster.type: subprocess` (nel_resources.launchers.subprocess_workers), against real
worker processes: each stale partition is a `nel` worker process, `workers` at a time; a
worker that dies fails its partition alone and the rerun launches only it; the states are
reported; the results equal a local run's.

The benchmark is a BYOB module over real GSM8K rows. Each worker process appends its shard,
PID and start/end times to a trace file (NEL_TEST_TRACE); `verify` kills the worker of shard
1 while a marker file exists, so "one worker fails" is deterministic.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.checks import check_supported, load_checked_config
from nel_resources.config import ConfigError, load_config
from nel_resources.launchers.registry import get_launcher
from tests.support.cli import start_nel
from tests.support.slurm_cluster import gsm8k_byob_dir
from tests.support.waiting import wait_for, wait_while_running

N_ROWS, N_SHARDS = 8, 4
MODULE = '''
import atexit
import itertools
import json
import os
import time
from pathlib import Path

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from benchmarks.datasets import load_file

MARKER = Path(__file__).with_name("crash-shard-1")
HOLD = Path(__file__).with_name("hold")
_TRACE = os.environ.get("NEL_TEST_TRACE")
if _TRACE and os.environ.get("NEL_SHARD_IDX"):  # a worker process (not the runner)
    _start = time.time()

    def _done() -> None:
        with open(_TRACE, "a") as f:
            f.write(json.dumps({"shard": int(os.environ["NEL_SHARD_IDX"]), "pid": os.getpid(),
                                "start": _start, "end": time.time()}) + "\\n")

    atexit.register(_done)


@register("sub_demo")
class SubDemo(DatasetEnvironment):
    name = "sub_demo"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def build_seed(self, row, idx):
        return SeedResult("Solve: " + row["question"] + "\\nEnd with #### <number>.", row["answer"], {})

    async def verify(self, response, expected, **metadata):
        from benchmarks.scoring import numeric_match

        if MARKER.exists() and os.environ.get("NEL_SHARD_IDX") == "1":
            os._exit(3)  # this worker dies mid-shard
        if HOLD.exists() and os.environ.get("NEL_TEST_PIDS") and os.environ.get("NEL_SHARD_IDX"):
            pid_file = Path(os.environ["NEL_TEST_PIDS"]) / (os.environ["NEL_SHARD_IDX"] + ".pid")
            pid_file.write_text(str(os.getpid()))
            while HOLD.exists():  # held until the test lets go (or the worker is killed)
                time.sleep(0.05)
        return numeric_match(response, expected)
'''


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gsm8k_byob_dir(tmp_path_factory.mktemp("subbench"), N_ROWS, "sub_demo.py", MODULE)


def _config(path: Path, url: str, bench_dir: Path, out: Path, cluster: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "services": {"ref": {"type": "api", "url": url, "model": "ref-model"}},
        "benchmarks": [{"name": "sub_demo", "module": str(bench_dir / "sub_demo.py"),
                        "params": {"path": str(bench_dir / "rows.jsonl")}}],
        "cluster": cluster, "output": {"dir": str(out)}}))
    return path


def _results(out: Path) -> list[tuple[Any, ...]]:
    rows = [(r["problem_idx"], r["response"], r["reward"])
            for p in sorted(out.glob("sub_demo/shard_results/model=*/shard=*/*.parquet"))
            for r in pq.read_table(p).to_pylist()]
    return sorted(rows, key=repr)


def _trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _states(out: Path) -> dict[int, str]:
    return {s.shard: s.state for s in get_launcher("subprocess").states(out)}


def _gone(pid: int) -> bool:
    """The process ended (a zombie left for its parent to reap counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith(("Z", "X"))
    except (OSError, IndexError):
        return True


def test_ctrl_c_stops_the_running_workers_and_starts_no_more(
        tmp_path: Path, bench_dir: Path, reference_server: Any) -> None:
    url = reference_server()
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    cfg = _config(tmp_path / "s.yaml", url, bench_dir, tmp_path / "sub",
                  {"type": "subprocess", "shards": N_SHARDS, "subprocess": {"workers": 2}})
    hold = bench_dir / "hold"
    hold.touch()
    proc = start_nel("eval", "run", str(cfg), "--no-progress", log=tmp_path / "nel.log",
                     env={"NEL_TEST_PIDS": str(pids_dir)})
    try:
        files = wait_while_running(lambda: (f := sorted(pids_dir.glob("*.pid"))) and len(f) == 2 and f,
                                   proc=proc, what="two workers holding", log=tmp_path / "nel.log")
        pids = [int(f.read_text()) for f in files]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, (tmp_path / "nel.log").read_text()[-3000:]
        # still held: only the interrupt can have ended them
        wait_for(lambda: all(_gone(p) for p in pids), timeout=60, what=f"workers {pids} to end")
    finally:
        hold.unlink()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert len(list(pids_dir.glob("*.pid"))) == 2  # no worker started after the interrupt


def test_workers_run_the_partitions_at_most_n_at_once_and_equal_the_local_run(
        tmp_path: Path, bench_dir: Path, reference_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_project.runner import run_eval

    url = reference_server()
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("NEL_TEST_TRACE", str(trace))
    local = run_eval(load_config(_config(tmp_path / "l.yaml", url, bench_dir, tmp_path / "local",
                                         {"type": "local", "shards": N_SHARDS})), progress=False)
    assert local.exit_status == 0, local.failures
    assert _trace(trace) == []  # the local run started no worker
    out = tmp_path / "sub"
    cfg = load_config(_config(tmp_path / "s.yaml", url, bench_dir, out,
                              {"type": "subprocess", "shards": N_SHARDS, "subprocess": {"workers": 1}}))
    summary = run_eval(cfg, progress=False)
    assert summary.exit_status == 0, summary.failures
    runs = _trace(trace)
    assert sorted(r["shard"] for r in runs) == list(range(N_SHARDS)), runs
    assert len({r["pid"] for r in runs}) == N_SHARDS  # one process per partition
    runs.sort(key=lambda r: r["start"])
    for a, b in itertools.pairwise(runs):  # workers: 1: one after the other
        assert a["end"] <= b["start"], (a, b)
    assert _states(out) == dict.fromkeys(range(N_SHARDS), "COMPLETED")
    assert _results(out) == _results(tmp_path / "local")
    assert sorted(p.name for p in (out / "launch" / "subprocess").iterdir()) == [
        f"sub_demo-ref-{s}.log" for s in range(N_SHARDS)]


def test_a_failed_worker_fails_its_partition_alone_and_a_rerun_launches_only_it(
        tmp_path: Path, bench_dir: Path, reference_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_project.runner import run_eval

    url = reference_server()
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("NEL_TEST_TRACE", str(trace))
    out = tmp_path / "sub"
    cfg = load_config(_config(tmp_path / "s.yaml", url, bench_dir, out,
                              {"type": "subprocess", "shards": N_SHARDS, "subprocess": {"workers": 2}}))
    marker = bench_dir / "crash-shard-1"
    marker.touch()
    try:
        first = run_eval(cfg, progress=False)
    finally:
        marker.unlink()
    assert first.exit_status != 0
    assert [(f.benchmark, f.model) for f in first.failures] == [("sub_demo", "ref")], first.failures
    assert "worker exited with 3" in first.failures[0].reason, first.failures[0].reason
    assert _states(out) == {0: "COMPLETED", 1: "FAILED", 2: "COMPLETED", 3: "COMPLETED"}
    assert sorted(r["shard"] for r in _trace(trace)) == [0, 2, 3]  # shard 1 died before atexit
    trace.unlink()
    second = run_eval(cfg, progress=False)
    assert second.exit_status == 0, second.failures
    assert [r["shard"] for r in _trace(trace)] == [1]  # only the failed partition ran again
    assert _states(out) == dict.fromkeys(range(N_SHARDS), "COMPLETED")
    local = run_eval(load_config(_config(tmp_path / "l.yaml", url, bench_dir, tmp_path / "local",
                                         {"type": "local", "shards": N_SHARDS})), progress=False)
    assert local.exit_status == 0
    assert _results(out) == _results(tmp_path / "local")


@pytest.mark.parametrize(("block", "where"), [
    ("  subprocess: {workers: 0}\n", ":7: key cluster.subprocess.workers: workers 0: write a positive integer"),
    ("  subprocess: {workers: two}\n", ":7: key cluster.subprocess.workers: workers 'two'"),
    ("  subprocess: {wrokers: 2}\n", ":7: key cluster.subprocess.wrokers: the subprocess setting 'wrokers'"),
    ("  docker: {network: host}\n", ":7: key cluster.docker: a `docker:` block in a subprocess cluster"),
    ("  subprocess: 3\n", ":7: cluster.subprocess: write a mapping of settings (got 3)"),
])
def test_bad_settings_are_one_line_naming_the_key(tmp_path: Path, block: str, where: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1', model: m}\n"
                 "benchmarks: [{name: gsm8k}]\ncluster:\n  type: subprocess\n  shards: 2\n" + block)
    with pytest.raises(ConfigError) as exc:
        check_supported(load_checked_config(p))
    msg = str(exc.value)
    assert where in msg and "\n" not in msg, msg


def test_its_block_in_another_cluster_type_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("services: {}\nbenchmarks: []\ncluster:\n  type: local\n  subprocess: {workers: 2}\n")
    with pytest.raises(ConfigError, match=r":5: key cluster.subprocess: a `subprocess:` block in a "
                                          r"local cluster \(only `type: subprocess` reads it\)"):
        check_supported(load_checked_config(p))


def test_its_block_survives_the_effective_config_the_workers_read(tmp_path: Path) -> None:
    from nel_resources.config import NelConfig

    cfg = load_config(data={"services": {}, "benchmarks": [],
                            "cluster": {"type": "subprocess", "subprocess": {"workers": 3}}})
    dumped = cfg.model_dump(mode="json", exclude_defaults=True)
    assert dumped["cluster"] == {"type": "subprocess", "subprocess": {"workers": 3}}
    assert NelConfig.model_validate(dumped).cluster.block("subprocess") == {"workers": 3}


def test_preflight_refuses_an_interpreter_without_nel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers run `sys.executable`: one that cannot import nel's worker is one line."""
    bare = Path("/usr/bin/python3")
    if not bare.exists():
        pytest.skip("no system python3 without nel to start")
    monkeypatch.setattr(sys, "executable", str(bare))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)  # not the project's directory either
    with pytest.raises(NelError, match=r"^cluster.type subprocess: /usr/bin/python3 cannot import "
                                       r"nel_assets.engine.evaluation.remote_shard .*set PYTHONPATH$"):
        get_launcher("subprocess").preflight(None)
