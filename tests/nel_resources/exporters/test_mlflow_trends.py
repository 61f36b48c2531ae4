"""The checkpoint trend's step metrics in each checkpoint's MLflow run, read back with
MlflowClient from a real SQLite store; logging again adds nothing; a dead tracker is one line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nel_resources.exporters.mlflow_trends import log_trend_metrics

pytest.importorskip("mlflow")

ROWS = [
    {"benchmark": "gsm8k", "model": "step-1", "step": 1, "delta": None, "delta_se": None, "cusum": 0.0,
     "alarm": False},
    {"benchmark": "gsm8k", "model": "step-2", "step": 2, "delta": -0.5, "delta_se": 0.1, "cusum": 2.0,
     "alarm": True},
    {"benchmark": "gsm8k", "model": "step-3", "step": 3, "delta": 0.1, "delta_se": 0.1, "cusum": 0.0,
     "alarm": False},  # never exported: skipped
]


def test_trend_metrics_land_at_the_checkpoint_step_once(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    exp = client.create_experiment("nel")
    ids = {m: client.create_run(exp, tags={"nel.benchmark": "gsm8k", "nel.model": m}).info.run_id
           for m in ("step-1", "step-2")}
    assert log_trend_metrics(ROWS, {}, tmp_path) == 1
    hist = {k: [(h.step, h.value) for h in client.get_metric_history(ids["step-2"], k)]
            for k in ("trend/delta", "trend/alarm", "trend/cusum", "trend/delta_se")}
    assert hist == {"trend/delta": [(2, -0.5)], "trend/alarm": [(2, 1.0)], "trend/cusum": [(2, 2.0)],
                    "trend/delta_se": [(2, 0.1)]}
    assert client.get_run(ids["step-1"]).data.metrics == {}  # the first checkpoint has no delta
    assert log_trend_metrics(ROWS, {}, tmp_path) == 0  # idempotent
    assert len(client.get_metric_history(ids["step-2"], "trend/alarm")) == 1


def test_an_unreachable_tracker_is_one_line_and_no_failure(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    assert log_trend_metrics(ROWS, {"tracking_uri": f"http://127.0.0.1:{port}"}, tmp_path) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mlflow: could not log the checkpoint trend"), err
