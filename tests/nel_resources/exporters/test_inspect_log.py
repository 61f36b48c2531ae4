"""The `inspect` exporter: a real run's bundle becomes an Inspect AI eval log that the real
`inspect_ai.log.read_eval_log` (the peer venv) reads back with its samples, scores and
metrics; reached both from a config's `output.export` and from `nel export --dest inspect`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for
from tests.support.peers import peer_inspect_python

N = 6
RIGHT = {0, 2, 3}

# Runs in the peer's Python: read the log with Inspect's own reader and print what it holds.
_READ = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
score = log.results.scores[0]
print(json.dumps({
    "status": log.status, "task": log.eval.task, "model": log.eval.model,
    "total": log.results.total_samples,
    "metrics": {k: m.value for k, m in score.metrics.items()},
    "samples": [{"id": s.id, "epoch": s.epoch, "target": s.target, "input": s.input,
                 "value": s.scores["nel"].value, "answer": s.scores["nel"].answer,
                 "completion": s.output.completion} for s in log.samples],
}))
"""


def _read_with_inspect(path: Path) -> dict:
    p = subprocess.run([str(peer_inspect_python()), "-c", _READ, str(path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _check(log: dict, rows: list[dict]) -> None:
    assert log["status"] == "success" and log["task"] == "gsm8k" and log["model"] == "ref-model"
    assert log["total"] == N
    assert log["metrics"]["accuracy"] == pytest.approx(len(RIGHT) / N)
    assert log["metrics"]["ci_low"] < len(RIGHT) / N < log["metrics"]["ci_high"]
    assert "stderr" in log["metrics"] and "pass_at_1" in log["metrics"]
    by_q = {r["question"]: r for r in rows}
    values = []
    for s in log["samples"]:
        row = next(r for q, r in by_q.items() if q in s["input"])  # the prompt holds the question
        assert s["target"] == row["answer"].split("####")[-1].strip().replace(",", "")
        assert s["epoch"] == 1 and s["completion"]
        values.append(s["value"])
    assert sorted(values) == sorted([1.0] * len(RIGHT) + [0.0] * (N - len(RIGHT)))


@pytest.fixture
def gsm8k_run(tmp_path: Path, reference_server, data_dir: Path) -> tuple[Path, list[dict], dict]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, RIGHT))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: {url}\n    model: ref-model\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {N}\n    shuffle_seed: null\n"
                   f"output:\n  dir: {tmp_path / 'out'}\n  export: [inspect]\n")
    return cfg, rows, {"NEL_DATA_DIR": str(data_dir)}


def test_config_export_writes_a_log_inspect_reads_back(gsm8k_run, tmp_path: Path) -> None:
    cfg, rows, env = gsm8k_run
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    assert p.returncode == 0, p.stderr
    (log_path,) = (tmp_path / "out" / "gsm8k" / "inspect").glob("*.json")
    assert log_path.name == "gsm8k_ref-model.json"
    _check(_read_with_inspect(log_path), rows)


def test_nel_export_dest_inspect(gsm8k_run, tmp_path: Path) -> None:
    cfg, rows, env = gsm8k_run
    cfg.write_text(cfg.read_text().replace("  export: [inspect]\n", ""))  # a run without it
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env).returncode == 0
    assert not (tmp_path / "out" / "gsm8k" / "inspect").exists()
    dest = tmp_path / "logs"
    p = run_nel("export", str(tmp_path / "out"), "--dest", "inspect", "--output-dir", str(dest), env=env)
    assert p.returncode == 0, p.stderr
    (log_path,) = dest.glob("*.json")
    _check(_read_with_inspect(log_path), rows)


def test_the_eval_format_is_a_zip_inspect_reads_back(gsm8k_run, tmp_path: Path) -> None:
    """NeMo Evaluator's `output.export_config.inspect: {format: eval}`: Inspect's zipped log,
    read by the real `read_eval_log`; `nel export` writes it again in place (idempotent)."""
    import zipfile

    cfg, rows, env = gsm8k_run
    cfg.write_text(cfg.read_text() + "  export_config:\n    inspect:\n      format: eval\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    assert p.returncode == 0, p.stderr
    (log_path,) = (tmp_path / "out" / "gsm8k" / "inspect").iterdir()
    assert log_path.suffix == ".eval" and zipfile.is_zipfile(log_path)
    assert {"header.json", "summaries.json", "_journal/start.json"} <= set(
        zipfile.ZipFile(log_path).namelist())
    _check(_read_with_inspect(log_path), rows)
    p = run_nel("export", str(tmp_path / "out"), "--dest", "inspect", "-o", "format=eval",
                "--output-dir", str(log_path.parent), env=env)
    assert p.returncode == 0, p.stderr
    assert [q.name for q in log_path.parent.iterdir()] == [log_path.name]
    _check(_read_with_inspect(log_path), rows)
