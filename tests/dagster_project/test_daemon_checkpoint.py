"""A checkpoint dropped into the watched directory, with `dagster-daemon` running, gets
evaluated, bundled, compared with the baseline and gated, with nobody touching anything.

Everything is real: the daemon (checkpoint sensor + `nel_automation` sensor), the run
workers it launches, and llama.cpp serving the tiny model both as the baseline (launched by
`nel eval run`) and as the new checkpoint (launched by the shard run's resource). The
checkpoint is the same GGUF file under a new name, so with greedy decoding it must answer
exactly like the baseline and the gate must say GO.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from tests.support.cli import run_nel, summary_json
from tests.support.dagster_ui import assert_no_leftovers, running_daemon, wait_for
from tests.support.realcomponents import llama_model_path, require_real_component
from tests.support.waiting import PROCESS_START_S, RUN_FINISH_S

CHECKPOINT = "step-100"
# Ceilings, not expectations (~60 s unloaded): sensor tick, shard run with its own llama.cpp
# server, then the automation sensor's bundle and comparison runs, on a loaded 2-core machine.
DEADLINE_S = 2 * RUN_FINISH_S
# One request budget for every llama.cpp service here: short answers, one thread.
LLAMA = {"type": "llama_cpp", "max_tokens": 8, "temperature": 0, "extra_args": ["--n_ctx", "512"],
         "startup_timeout": 120}
BUNDLE = dg.AssetKey(["gsm8k", "bundle"])
COMPARISON = dg.AssetKey(["comparison"])


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> Any:
    """The latest materialization record of `key` for `partition`, or None."""
    res = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                          limit=1)
    return res.records[0] if res.records else None


@pytest.mark.slow
@pytest.mark.llama
def test_daemon_evaluates_compares_and_gates_a_new_checkpoint(tmp_path: Path, data_dir: Path,
                                                              request: pytest.FixtureRequest) -> None:
    model = llama_model_path()
    if importlib.util.find_spec("llama_cpp") is None:
        require_real_component("llama_cpp is not installed (pip install 'nel[llama]')")
    if not model.is_file():
        require_real_component(f"model file {model} is missing (set NEL_TEST_MODEL)")
    ckdir, out = tmp_path / "ckpts", tmp_path / "out"
    ckdir.mkdir()
    cfg = {
        "services": {"base": {**LLAMA, "model_path": str(model), "model": "base"}},
        "benchmarks": [{"name": "gsm8k", "max_problems": 2, "shards": 1}],
        # Two identical items cannot rule out a drop of 0.66 (the paired CI is honest about
        # 0 discordant pairs): the allowed drop is set above it, so an equal checkpoint is GO.
        "comparison": {"baseline": "base", "max_drop": 0.7},
        # Both sensors (checkpoints, and automation at min(30, this)) may then tick on every pass
        # of the daemon's 5 s loop; at 5 s a tick just under 5 s after the last waits a pass more.
        "checkpoints": {"dir": str(ckdir), "pattern": "*.gguf", "min_age_seconds": 1,
                        "interval_seconds": 1, "service_template": LLAMA},
        "output": {"dir": str(out)},
    }
    cfg_path = tmp_path / "nel.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {"NEL_DATA_DIR": str(data_dir)}

    # The baseline first, from the CLI, on the persistent instance the daemon will use.
    summary = summary_json(run_nel("eval", "run", str(cfg_path), "--json", "--no-progress", env=env))
    (base,) = summary["results"]
    assert base["model"] == "base" and base["n_items"] == 2
    home = out / ".dagster"
    instance = dg.DagsterInstance.from_config(str(home))
    request.addfinalizer(instance.dispose)
    assert _latest(instance, BUNDLE, "base") is not None

    with running_daemon(home, cfg_path, data_dir, tmp_path / "daemon.log") as daemon:
        # The checkpoint must arrive while the daemon watches, not be found when it loads.
        wait_for(lambda: "sensor checkpoint_sensor skipped" in daemon.log_tail(200_000).lower(),
                 timeout=PROCESS_START_S, what="a first (empty) checkpoint_sensor tick", alive=daemon)
        # Written the way trainers do: to a hidden name, then renamed into place.
        part = ckdir / f".{CHECKPOINT}.gguf.part"
        shutil.copyfile(model, part)
        ckpt = ckdir / f"{CHECKPOINT}.gguf"
        os.replace(part, ckpt)
        t0 = time.monotonic()

        def done() -> bool:
            return (CHECKPOINT in instance.get_dynamic_partitions("model")
                    and _latest(instance, BUNDLE, CHECKPOINT) is not None
                    and _latest(instance, COMPARISON, CHECKPOINT) is not None)

        wait_for(done, timeout=DEADLINE_S, what=f"bundle and comparison of {CHECKPOINT}", interval=2,
                 alive=daemon)
        elapsed = time.monotonic() - t0
        comparison = _latest(instance, COMPARISON, CHECKPOINT)
        # The gate check runs after the comparison in the same run: wait for that run to end.
        unfinished = {dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
                      dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED}
        wait_for(lambda: not instance.get_runs(filters=dg.RunsFilter(statuses=list(unfinished))),
                 timeout=RUN_FINISH_S, what="the daemon's runs to finish", alive=daemon)
    print(f"\n{CHECKPOINT}: dropped -> compared and gated in {elapsed:.1f}s")
    # the daemon's code server and run workers went down with its process group
    assert_no_leftovers(str(home), "the daemon")

    # the sensor evaluated the checkpoint (its real path travels with the run) ...
    shard_runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": "checkpoint_sensor"}))
    assert [r.tags.get("nel/checkpoint") for r in shard_runs] == [str(ckpt.resolve())]
    assert shard_runs[0].status == dg.DagsterRunStatus.SUCCESS
    # ... and automation built the bundle and the comparison from it
    bundle = _latest(instance, BUNDLE, CHECKPOINT)
    md = bundle.asset_materialization.metadata
    assert md["n_items"].value == 2 and md["complete"].value is True
    assert md["score"].value == base["score"]  # same weights, greedy decoding
    cmp_run = instance.get_run_by_id(comparison.run_id)
    assert cmp_run is not None and cmp_run.status == dg.DagsterRunStatus.SUCCESS
    assert cmp_run.tags.get("dagster/from_automation_condition") == "true"
    cmd = comparison.asset_materialization.metadata
    assert cmd["baseline"].value == "base" and cmd["candidate"].value == CHECKPOINT
    assert cmd["gate_decision"].value == "GO"
    assert (out / "comparison" / "comparison" / f"model={CHECKPOINT}" / "regression.json").is_file()
    # the blocking gate check ran on that partition and passed
    checks = [ev.dagster_event.event_specific_data
              for ev in instance.all_logs(comparison.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
    assert [(c.check_name, c.partition, c.passed) for c in checks] == [("gate", CHECKPOINT, True)]

    # the checkpoint's llama.cpp server was launched by the run, logged, and torn down with it
    assert (out / "logs" / f"{CHECKPOINT}.log").is_file()
    assert_no_leftovers(str(ckpt.resolve()), "the run that launched the checkpoint's llama.cpp server")
