"""Six checkpoints dropped into the watched directory, with `dagster-daemon` running, become a
series: each lands in MLflow at its step, `checkpoint_trends` holds the paired deltas, and
the regression alarm fires at the planted drop and not before.

Everything is real: the daemon (checkpoint sensor + `nel_automation` sensor), the run
workers it launches, one server process per checkpoint launched by the shard run's resource,
MLflow's SQLite store read back with MlflowClient, the Parquet table read with DuckDB. A
"checkpoint" here is the reference server's answer book (a JSONL file): which GSM8K items
the checkpoint answers right is its weights, so the test knows every item's score at every
step and plants a drop of 8 of 12 items at step 500.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from benchmarks.datasets import load_file
from tests.support.cli import run_nel, summary_json
from tests.support.dagster_ui import assert_no_leftovers, running_daemon, wait_for
from tests.support.gsm8k import answers_for
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import PROCESS_START_S, RUN_FINISH_S

N = 12
#: Items each checkpoint answers right. A rise, a dip of one item (two lost, one gained: a
#: real-looking wobble the alarm must not take for a regression), recovery, the planted drop
#: (8 items lost at once) at step 500, then a small recovery.
RIGHT: dict[int, set[int]] = {
    100: set(range(8)),
    200: set(range(9)),
    300: set(range(7)) | {9},
    400: set(range(10)),
    500: {0, 1},
    600: {0, 1, 2},
}
DROP_STEP = 500
# Ceiling, not an expectation: six shard runs (each starts its checkpoint's server), six
# bundle runs and the trend runs, launched by the daemon on a loaded 2-core machine.
DEADLINE_S = 3 * RUN_FINISH_S
TRENDS = dg.AssetKey(["checkpoint_trends"])
BUNDLE = dg.AssetKey(["gsm8k", "bundle"])
REF_MAIN = REPO_ROOT / "nel_resources" / "reference_server" / "__main__.py"


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None) -> Any:
    f = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None)
    res = instance.fetch_materializations(f, limit=1)
    return res.records[0] if res.records else None


def _paired(prev: set[int], cur: set[int]) -> tuple[float, float]:
    """Delta and paired SE of two checkpoints, by hand from the planted item scores."""
    d = [(i in cur) - (i in prev) for i in range(N)]
    return statistics.mean(d), statistics.stdev(d) / math.sqrt(N)


@pytest.mark.slow
def test_daemon_turns_checkpoints_into_a_tracked_alarmed_series(tmp_path: Path, data_dir: Path,
                                                               reference_server: Any,
                                                               request: pytest.FixtureRequest) -> None:
    pytest.importorskip("mlflow")
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    ckdir, out = tmp_path / "ckpts", tmp_path / "out"
    ckdir.mkdir()
    # The baseline is served by a reference server nel does not start; it seeds the dataset
    # and the instance the daemon uses, and is no checkpoint (its name has no step).
    base_url = reference_server(answers=answers_for(rows, set(range(N))))
    template = {"type": "vllm", "startup_timeout": 120,
                "command": [sys.executable, "-P", str(REF_MAIN), "--port", "{port}", "--answers", "{checkpoint}"]}
    cfg = {
        "services": {"base": {"type": "api", "url": base_url, "model": "base"}},
        "benchmarks": [{"name": "gsm8k", "max_problems": N, "shards": 1}],
        # Both sensors (checkpoints, and automation at min(30, this)) may then tick on every pass
        # of the daemon's 5 s loop; at 5 s a tick just under 5 s after the last waits a pass more.
        "checkpoints": {"dir": str(ckdir), "pattern": "*.jsonl", "min_age_seconds": 1,
                        "interval_seconds": 1, "service_template": template},
        "output": {"dir": str(out), "export": ["mlflow"]},
    }
    cfg_path = tmp_path / "nel.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {"NEL_DATA_DIR": str(data_dir)}
    (base,) = summary_json(run_nel("eval", "run", str(cfg_path), "--json", "--no-progress", env=env))["results"]
    assert base["model"] == "base" and base["score"] == 1.0
    home = out / ".dagster"
    instance = dg.DagsterInstance.from_config(str(home))
    request.addfinalizer(instance.dispose)

    with running_daemon(home, cfg_path, data_dir, tmp_path / "daemon.log") as daemon:
        wait_for(lambda: "sensor checkpoint_sensor skipped" in daemon.log_tail(200_000).lower(),
                 timeout=PROCESS_START_S, what="a first (empty) checkpoint_sensor tick", alive=daemon)
        t0 = time.monotonic()
        for step, right in RIGHT.items():
            # written the way trainers do: to a hidden name, then renamed into place
            part = ckdir / f".step-{step}.jsonl.part"
            part.write_text("".join(json.dumps(r) + "\n" for r in answers_for(rows, right)))
            os.replace(part, ckdir / f"step-{step}.jsonl")

        def series_done() -> Any:
            rec = _latest(instance, TRENDS)
            if rec is None or rec.asset_materialization.metadata["n_checkpoints"].value < len(RIGHT):
                return None
            return rec

        rec = wait_for(series_done, timeout=DEADLINE_S, what="checkpoint_trends over all six checkpoints",
                       interval=2, alive=daemon)
        elapsed = time.monotonic() - t0
        unfinished = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
                      dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
        wait_for(lambda: not instance.get_runs(filters=dg.RunsFilter(statuses=unfinished)),
                 timeout=RUN_FINISH_S, what="the daemon's runs to finish", alive=daemon)
    print(f"\nsix checkpoints: dropped -> checkpoint_trends in {elapsed:.1f}s; asset build "
          f"{rec.asset_materialization.metadata['elapsed_s'].value}s")
    assert_no_leftovers(str(home), "the daemon")
    assert_no_leftovers(str(ckdir), "the runs that launched the checkpoints' servers")

    # the sensor evaluated each checkpoint, and automation built the trend from the bundles
    shard_runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": "checkpoint_sensor"}))
    assert sorted(r.tags["nel/model"] for r in shard_runs) == sorted(f"step-{s}" for s in RIGHT)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in shard_runs)
    trend_run = instance.get_run_by_id(rec.run_id)
    assert trend_run is not None and trend_run.tags.get("dagster/from_automation_condition") == "true"
    md = rec.asset_materialization.metadata
    assert md["alarms"].value == f"gsm8k @ step {DROP_STEP}"
    assert "**ALARM**" in md["gsm8k"].value and "data:image/svg+xml;base64," in md["gsm8k"].value

    # checkpoint_trends, read with DuckDB through nel's view: the right rows, deltas by hand
    from nel_resources.storage.views import connect

    con = connect(out)
    got = con.execute("SELECT step, model, score, n, prev_step, n_shared, delta, delta_se, alarm, "
                      "first_alarm_step, step_noise FROM checkpoint_trends WHERE benchmark = 'gsm8k' "
                      "AND family = '' ORDER BY step").fetchall()
    assert [g[0] for g in got] == list(RIGHT) and [g[1] for g in got] == [f"step-{s}" for s in RIGHT]
    steps = list(RIGHT)
    ses = []
    for i, (step, _m, score, n, prev, n_shared, delta, se, alarm, first, _noise) in enumerate(got):
        assert score == pytest.approx(len(RIGHT[step]) / N) and n == N
        assert alarm is (step == DROP_STEP if i else False), (step, alarm)
        assert first == DROP_STEP
        if i == 0:
            assert prev is None and delta is None
            continue
        want_delta, want_se = _paired(RIGHT[steps[i - 1]], RIGHT[step])
        ses.append(want_se)
        assert (prev, n_shared) == (steps[i - 1], N)
        assert delta == pytest.approx(want_delta) and se == pytest.approx(want_se)
    assert got[0][-1] == pytest.approx(math.sqrt(sum(s * s for s in ses) / len(ses)))
    assert list((out / "checkpoint_trends" / "checkpoint_trends").glob("*.svg"))

    # each checkpoint is an MLflow run whose score was logged at its step
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("nel")
    assert exp is not None
    runs = {r.data.tags["nel.model"]: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"base", *(f"step-{s}" for s in RIGHT)}
    for step, right in RIGHT.items():
        run_id = runs[f"step-{step}"].info.run_id
        hist = client.get_metric_history(run_id, "score")
        assert [(h.step, h.value) for h in hist] == [(step, pytest.approx(len(right) / N))]
        # ... and the trend put the alarm and the delta beside it, at the same step
        alarm = client.get_metric_history(run_id, "trend/alarm")
        assert [(h.step, h.value) for h in alarm][-1:] == ([] if step == steps[0] else
                                                          [(step, 1.0 if step == DROP_STEP else 0.0)])
    drop = client.get_metric_history(runs[f"step-{DROP_STEP}"].info.run_id, "trend/delta")
    assert drop[-1].step == DROP_STEP and drop[-1].value == pytest.approx(-8 / N)
