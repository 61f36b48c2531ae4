"""Provenance and cost reach every tracker: one real `nel eval run` (reference server, priced
service) exports to MLflow, W&B (offline) and Inspect; each is read back with the tool's own
reader."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.datasets import load_file
from nel_resources.services.provenance import text_sha256
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for
from tests.support.peers import peer_inspect_python
from tests.support.wandb_runs import read_run

N = 6
RIGHT = {0, 2, 3}
TEMPLATE = "{{ messages }}"
_WANDB_ENV = ["WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_API_KEY", "WANDB_RUN_ID",
              "WANDB_RESUME", "WANDB_BASE_URL", "MLFLOW_TRACKING_URI"]
_READ = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
print(json.dumps(log.eval.metadata))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, dict]:
    from nel_resources.reference_server import start_reference_server

    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    proc, url = start_reference_server(answers=[dict(a) for a in answers_for(rows, RIGHT)])
    tmp = tmp_path_factory.mktemp("export")
    cfg = tmp / "c.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: {url}\n    model: ref-model\n"
                   f"    generation:\n      extra_body:\n        chat_template: '{TEMPLATE}'\n"
                   f"    pricing:\n      input_per_million: 3\n      output_per_million: 15\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {N}\n    shuffle_seed: null\n"
                   f"output:\n  dir: {tmp / 'out'}\n  export: [mlflow, wandb, inspect]\n")
    try:
        p = run_nel("eval", "run", str(cfg), "--no-progress", unset=_WANDB_ENV,
                    env={"NEL_DATA_DIR": str(data_dir), "WANDB_BASE_URL": "http://127.0.0.1:9"})
    finally:
        proc.stop()
    assert p.returncode == 0, p.stderr
    assert "export failed" not in p.stderr, p.stderr
    out = tmp / "out"
    (ev,) = out.rglob("eval-*.json")
    return out, json.loads(ev.read_text())["bundle"]


def test_bundle_holds_cost_and_provenance(exported: tuple[Path, dict]) -> None:
    _, bundle = exported
    assert bundle["cost"]["total_cost"] > 0 and bundle["cost"]["correct"] == len(RIGHT)
    assert bundle["provenance"]["served"]["chat_template"]["sha256"] == text_sha256(TEMPLATE)


def test_mlflow_run_has_provenance_params_tags_and_cost_metrics(exported: tuple[Path, dict]) -> None:
    out, bundle = exported
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("nel").experiment_id])
    p, m, t = run.data.params, run.data.metrics, run.data.tags
    assert p["provenance.served.chat_template.sha256"] == text_sha256(TEMPLATE)
    assert p["provenance.served.model.reported_id"] == "nel-reference"
    assert p["provenance.dataset.sha256"] == bundle["provenance"]["dataset"]["sha256"]
    assert p["provenance.nel_version"] == bundle["provenance"]["nel_version"]
    assert t["nel.chat_template_sha256"] == text_sha256(TEMPLATE)
    assert t["nel.dataset_sha256"] == bundle["provenance"]["dataset"]["sha256"]
    assert t["nel.server"] == "nel-reference-server 1"
    cost = bundle["cost"]
    assert m["cost/total_usd"] == pytest.approx(cost["total_cost"])
    assert m["cost/per_correct_usd"] == pytest.approx(cost["total_cost"] / len(RIGHT))
    assert m["cost/prompt_usd"] == pytest.approx(cost["prompt_tokens"] * 3 / 1e6)


def test_wandb_config_has_provenance_and_history_has_cost(exported: tuple[Path, dict]) -> None:
    out, bundle = exported
    (file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    run = read_run(file)
    assert run.config["provenance.served.chat_template.sha256"] == text_sha256(TEMPLATE)
    assert run.config["provenance.prompt.template_sha256"] == bundle["provenance"]["prompt"]["template_sha256"]
    (row,) = [h for h in run.history if "cost/total_usd" in h]
    assert row["cost/total_usd"] == pytest.approx(bundle["cost"]["total_cost"])


def test_inspect_log_metadata_has_provenance_and_cost(exported: tuple[Path, dict]) -> None:
    out, bundle = exported
    (log,) = (out / "gsm8k" / "inspect").glob("*.json")
    p = subprocess.run([str(peer_inspect_python()), "-c", _READ, str(log)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    meta = json.loads(p.stdout)
    assert meta["nel_provenance"] == bundle["provenance"]
    assert meta["nel_cost"]["total_cost"] == pytest.approx(bundle["cost"]["total_cost"])
