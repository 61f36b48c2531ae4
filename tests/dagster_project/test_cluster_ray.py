"""`cluster.type: ray` on a real local Ray cluster (started in-process by nel, with its own
temp dir; never `ray stop`): 3 shards as Ray tasks equal the local run item by item, a task
that fails leaves the others' results recorded, and a rerun runs only it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from tests.support.cli import run_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.cluster_runs import MODEL, items, local_run, shard_materializations, write_config
from tests.support.gsm8k import answers_for
from tests.support.realcomponents import require_real_component
from tests.support.reference import reset_server_stats

N, SHARDS = 18, 3


@pytest.fixture(scope="module")
def ray_installed() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        require_real_component("ray is not installed (pip install 'nel[ray]')")


def test_ray_shards_equal_local_and_a_failed_task_reruns_alone(
        tmp_path: Path, reference_server, server_stats, data_dir: Path, ray_installed: None) -> None:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, set(range(0, N, 3))))
    env = {"NEL_DATA_DIR": str(data_dir)}
    local = local_run(tmp_path, url, env, n=N, shards=SHARDS)

    out = tmp_path / "ray"
    cfg = write_config(tmp_path / "ray.yaml", url, out, n=N, shards=SHARDS, cluster={"type": "ray"})
    # Shard 1 cannot write its journal (a file stands where its directory goes): its task
    # fails on its own; shards 0 and 2 finish and are recorded.
    blocker = out / "gsm8k" / "_journal" / f"model={MODEL}" / "shard=1"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")
    reset_server_stats(url)
    first = run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env, timeout=600)
    assert first.returncode != 0, first.stdout
    errs = error_lines(first.stdout, first.stderr)
    assert len(errs) == 1 and "gsm8k/ref" in errs[0] and "Ray task failed" in errs[0], first.stderr
    done = shard_materializations(out)
    assert set(done) == {f"{MODEL}|0", f"{MODEL}|2"}, done
    assert all("ray task" in md["launched_by"] for md in done.values())
    assert sum(md["requests_sent"] for md in done.values()) == 12  # 6 items per shard
    assert not (out / "gsm8k" / "bundle" / f"model={MODEL}" / "bundle.json").exists()
    from nel_resources.launchers.registry import get_launcher

    states = {st.shard: st.state for st in get_launcher("ray").states(out)}
    assert states == {0: "COMPLETED", 1: "FAILED", 2: "COMPLETED"}, states

    blocker.unlink()
    reset_server_stats(url)
    s = summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress", env=env, timeout=600))
    assert s["shards_run"] == 1 and s["requests_sent"] == 6, s
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions") == 6
    assert shard_materializations(out)[f"{MODEL}|1"]["requests_sent"] == 6
    assert items(out) == items(local) and len(items(out)) == N
    assert {st.shard: st.state for st in get_launcher("ray").states(out)} == dict.fromkeys(range(3), "COMPLETED")
    (res,) = s["results"]
    assert res["score"] == pytest.approx(6 / N) and res["n_items"] == N


def test_unreachable_ray_address_is_one_line(tmp_path: Path, ray_installed: None) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = write_config(tmp_path / "ray.yaml", "http://127.0.0.1:9/v1", tmp_path / "out", n=4, shards=2,
                       cluster={"type": "ray", "ray": {"address": f"127.0.0.1:{port}"}})
    proc = run_nel("eval", "run", str(cfg), "--no-progress", env={"NEL_DATA_DIR": "/nonexistent"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"cannot reach the Ray cluster at 127.0.0.1:{port}" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_unknown_ray_key_is_refused(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "ray.yaml", "http://127.0.0.1:9/v1", tmp_path / "out", n=4, shards=2,
                       cluster={"type": "ray", "ray": {"runtime_env": {"pip": ["x"]}}})
    proc = run_nel("eval", "run", str(cfg), "--no-progress")
    assert proc.returncode == 2 and "cluster.ray.runtime_env" in proc.stderr, proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1
