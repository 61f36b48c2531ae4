"""The checkpoint sensor, tick by tick: new partitions, run requests, idempotent cursor,
half-written and vanished checkpoints skipped and retried; run-time service resolution."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.definitions import build_definitions
from dagster_project.sensors import (
    build_checkpoint_sensor,
    discover_checkpoints,
    with_checkpoint_services,
)
from nel_resources.config import load_config
from nel_resources.specs import resolve, service_resource_key


def _cfg(tmp_path: Path, ckdir: Path, **ck: object):
    return load_config(data={
        "services": {"base": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "base"}},
        "benchmarks": [{"name": "gsm8k", "max_problems": 4, "shards": 2}],
        "comparison": {"baseline": "base"},
        "checkpoints": {"dir": str(ckdir), "min_age_seconds": 5, "interval_seconds": 5,
                        "service_template": {"type": "llama_cpp", "extra_args": ["--n_ctx", "512"],
                                             "max_tokens": 16}, **ck},
        "output": {"dir": str(tmp_path / "out")},
    })


def _age(p: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(p, (t, t))


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, cursor: str | None):
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor)
    result = sensor(ctx)
    return result, ctx


def test_new_checkpoints_become_partitions_and_runs_once(tmp_path: Path, data_dir: Path,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    ckdir = tmp_path / "ckpts"
    ckdir.mkdir()
    cfg = _cfg(tmp_path, ckdir)
    sensor = build_checkpoint_sensor(cfg, str(tmp_path / "out"))
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    instance = dg.DagsterInstance.ephemeral()

    ready = ckdir / "Step-100.gguf"
    ready.write_bytes(b"GGUF" + b"\0" * 64)
    _age(ready, 60)
    young = ckdir / "step-200.gguf"
    young.write_bytes(b"GGUF")  # just written: maybe still being written
    headless = ckdir / "step-300.gguf"
    headless.write_bytes(b"\0" * 32)  # no header yet
    _age(headless, 60)
    (ckdir / "notes.txt").write_text("not a checkpoint")

    r1, _ = _tick(sensor, instance, None)
    assert [p.partition_keys for p in r1.dynamic_partitions_requests] == [["step-100"]]
    keys = sorted(str(rr.partition_key) for rr in r1.run_requests)
    assert keys == ["step-100|0", "step-100|1"]
    rr = r1.run_requests[0]
    assert rr.asset_selection == [dg.AssetKey(["gsm8k", "shard_results"])]
    assert rr.tags["nel/checkpoint"] == str(ready.resolve())  # the real path travels with the run
    obs = r1.asset_events
    assert {str(o.partition) for o in obs} == {"step-100|0", "step-100|1"}
    assert all(o.metadata["checkpoint_path"].value == str(ready.resolve()) for o in obs)
    cur = json.loads(r1.cursor)
    assert set(cur["accepted"]) == {"step-100"} and {"step-200", "step-300"} <= set(cur["watching"])
    log = capfd.readouterr().err
    assert "step-200" in log and "still being written" in log
    assert "step-300" in log and "no GGUF header" in log

    # same state again: nothing new is requested (idempotent)
    instance.add_dynamic_partitions("model", ["step-100"])
    r2, _ = _tick(sensor, instance, r1.cursor)
    assert not r2.run_requests and not r2.dynamic_partitions_requests

    # the young one grows, then settles; the headless one vanishes
    young.write_bytes(b"GGUF" + b"\0" * 128)
    _age(young, 60)
    headless.unlink()
    r3, _ = _tick(sensor, instance, r2.cursor)
    assert not r3.run_requests  # size changed since the last look: wait one more tick
    assert "changed since the last look" in capfd.readouterr().err
    assert "step-300" not in json.loads(r3.cursor)["watching"]
    r4, _ = _tick(sensor, instance, r3.cursor)
    assert sorted(str(rr.partition_key) for rr in r4.run_requests) == ["step-200|0", "step-200|1"]


def test_checkpoint_service_resolves_at_run_time(tmp_path: Path, data_dir: Path) -> None:
    ckdir = tmp_path / "ckpts"
    ckdir.mkdir()
    cfg = _cfg(tmp_path, ckdir)
    assert with_checkpoint_services(cfg) is cfg
    (ckdir / "step-7.gguf").write_bytes(b"GGUF")
    full = with_checkpoint_services(cfg)
    # The checkpoint becomes a run spec of every benchmark, with the templated service.
    run = resolve(full).benchmarks[0].run_for("step-7")
    assert run is not None and run.service.name == "step-7"
    svc = run.service.config
    assert svc.type == "llama_cpp" and svc.model_path == str((ckdir / "step-7.gguf").resolve())
    assert svc.generation.max_tokens == 16 and svc.model == "step-7"
    assert full.benchmarks[0].service_names(full.services) == ["base", "step-7"]
    defs = build_definitions(cfg, str(tmp_path / "out"))
    res = defs.resources
    assert type(res[service_resource_key("step-7")]).__name__ == "LaunchedModelService"
    assert {j.name for j in defs.jobs} >= {"evaluate", "compare", "gate"}
    assert {s.name for s in defs.sensors} == {"checkpoint_sensor", "nel_automation"}
    ag = defs.resolve_asset_graph()
    assert ag.get(dg.AssetKey(["gsm8k", "bundle"])).automation_condition is not None
    assert ag.get(dg.AssetKey(["gsm8k", "shard_results"])).automation_condition is None


def test_directory_checkpoints(tmp_path: Path) -> None:
    ckdir = tmp_path / "ckpts"
    (ckdir / "iter_0001000").mkdir(parents=True)
    (ckdir / "iter_0001000" / "model.safetensors").write_bytes(b"x" * 10)
    (ckdir / "latest.txt").write_text("1000")
    cfg = _cfg(tmp_path, ckdir, directories=True, pattern="iter_*",
               service_template={"type": "vllm", "tensor_parallel_size": 2, "model": "{checkpoint_name}"})
    (cp,) = discover_checkpoints(cfg.checkpoints)
    assert cp.name == "iter_0001000" and cp.size == 10
    full = with_checkpoint_services(cfg)
    svc = full.services["iter_0001000"]
    assert svc.type == "vllm" and svc.model_path == str(cp.path) and svc.tensor_parallel_size == 2
