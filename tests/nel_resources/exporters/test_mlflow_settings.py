"""The `mlflow` exporter's settings: NeMo Evaluator 0.3.0's keys accepted, the rest refused
in one line, and where the runs go when no tracking URI is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_resources.exporters import check_settings
from nel_resources.exporters.mlflow_settings import (
    MlflowSettings,
    local_artifact_root,
    parse_settings,
    tracking_uri,
)
from tests.support.peers import peer_nemo_bin

# NeMo Evaluator 0.3.0's MLflowExportSettings fields (nemo_evaluator/engine/exporters/mlflow_export.py)
NEMO_KEYS = {"tracking_uri", "experiment_name", "log_config_params", "log_config_params_max_depth",
             "skip_existing", "run_name", "description", "tags", "extra_metadata", "copy_artifacts",
             "only_required", "copy_logs", "exclude_patterns", "emit_traces", "emit_traces_max_samples",
             "emit_traces_content_max"}


def test_every_nemo_key_is_a_setting() -> None:
    assert set(MlflowSettings.model_fields) == NEMO_KEYS


def test_the_peers_own_keys_are_these() -> None:
    """Read from the installed peer's source, so a new 0.3.x key shows up here."""
    import ast

    site = next((peer_nemo_bin().parent.parent / "lib").glob("python3*/site-packages"))
    tree = ast.parse((site / "nemo_evaluator/engine/exporters/mlflow_export.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "MLflowExportSettings")
    keys = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and n.target.id != "model_config"}
    assert keys == NEMO_KEYS


def test_a_nemo_walkthrough_setting_block_is_accepted() -> None:
    s = parse_settings({"tracking_uri": "http://127.0.0.1:5000", "copy_artifacts": True, "only_required": False,
                        "copy_logs": True, "exclude_patterns": ["deliverables", "*.parquet"],
                        "experiment": "nemotron-eval", "emit_traces": False, "tags": {"team": "a"}})
    assert s.experiment_name == "nemotron-eval" and not s.only_required and s.copy_logs


@pytest.mark.parametrize(("settings", "says"), [
    ({"tracking_urii": "x"}, "unknown setting 'tracking_urii'; the settings are tracking_uri, "),
    ({"skip_existing": "maybe"}, "setting 'skip_existing': Input should be a valid boolean"),
    ({"emit_traces_max_samples": -1}, "setting 'emit_traces_max_samples'"),
    ({"experiment_name": ""}, "setting 'experiment_name'"),
])
def test_bad_settings_are_one_line(settings: dict, says: str) -> None:
    with pytest.raises(NelError) as err:
        parse_settings(settings)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert check_settings("mlflow", settings) == str(err.value)  # what the config check asks


def test_where_the_runs_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    default = tracking_uri(parse_settings({}), tmp_path)
    assert default == f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    assert local_artifact_root(default) == (tmp_path / "mlflow" / "artifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000/")
    assert tracking_uri(parse_settings({}), tmp_path) == "http://127.0.0.1:5000"
    assert local_artifact_root("http://127.0.0.1:5000") is None  # a server keeps its own
    # the setting wins; a name without :// is an environment variable's (as in 0.3.0)
    monkeypatch.setenv("MY_URI", "http://127.0.0.1:6000")
    assert tracking_uri(parse_settings({"tracking_uri": "MY_URI"}), tmp_path) == "http://127.0.0.1:6000"
