"""CI jobs: `dagster job execute -m dagster_project.definitions -j evaluate|compare|gate`
in a real subprocess; the gate's exit status follows the verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.datasets import load_file
from dagster_project.instance_config import write_instance_yaml
from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT


def _answers(rows: list[dict], right: bool) -> list[dict]:
    out = []
    for r in rows:
        g = r["answer"].split("####")[-1].strip().replace(",", "")
        out.append({"match": r["question"][:120], "content": f"#### {g if right else int(float(g)) + 1}"})
    return out


def _dagster(job: str, cfg: Path, home: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("dagster")
    env = nel_env({"NEL_CONFIG": str(cfg), "DAGSTER_HOME": str(home), "NEL_DATA_DIR": str(data_dir)})
    return subprocess.run([str(exe), "job", "execute", "-m", "dagster_project.definitions", "-j", job],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=240,
                          start_new_session=True)


def _dg_launch(job: str, cfg: Path, home: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """The same job through `dg launch` (the successor of `dagster job execute`)."""
    exe = Path(sys.executable).with_name("dg")
    env = nel_env({"NEL_CONFIG": str(cfg), "DAGSTER_HOME": str(home), "NEL_DATA_DIR": str(data_dir)})
    return subprocess.run([str(exe), "launch", "--job", job, "-m", "dagster_project.definitions"],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=240,
                          start_new_session=True)


@pytest.mark.slow
def test_evaluate_compare_gate_jobs_exit_status(tmp_path: Path, reference_server, data_dir: Path) -> None:
    n = 16
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:n]
    good = reference_server(answers=_answers(rows, True))
    bad = reference_server(answers=_answers(rows, False))
    out = tmp_path / "out"
    home = out / ".dagster"
    home.mkdir(parents=True)
    # The instance nel itself writes (one consolidated SQLite event log, pooled connections,
    # no telemetry): Dagster's default makes a new database for every run of every job.
    write_instance_yaml(home, {})
    cfg = {
        "services": {"base": {"type": "api", "url": good, "model": "base"},
                     "cand": {"type": "api", "url": bad, "model": "cand"},
                     "same": {"type": "api", "url": good, "model": "same"}},
        "benchmarks": [{"name": "gsm8k", "max_problems": n}],
        # 16 identical items cannot rule out a 5-point drop (the paired CI is about ±0.2 wide):
        # the allowed drop is set so an identical model passes and an all-wrong one does not.
        "comparison": {"baseline": "base", "max_drop": 0.3},
        "output": {"dir": str(out)},
    }
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg))

    ev = _dagster("evaluate", path, home, data_dir)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "RUN_SUCCESS" in ev.stderr
    for m in ("base", "cand", "same"):
        assert (out / "gsm8k" / "bundle" / f"model={m}").is_dir()

    cmp_ = _dagster("compare", path, home, data_dir)
    assert cmp_.returncode == 0, cmp_.stderr[-3000:]

    gate = _dagster("gate", path, home, data_dir)
    assert gate.returncode != 0, gate.stderr[-3000:]
    assert "NO-GO" in gate.stderr and "cand" in gate.stderr
    assert "gate gate on same: GO" in gate.stderr or "same: GO" in gate.stderr
    launched = _dg_launch("gate", path, home, data_dir)
    assert launched.returncode != 0 and "NO-GO" in launched.stderr, launched.stderr[-3000:]

    # without the regressing candidate the same gate passes: exit status follows the verdict
    cfg["services"].pop("cand")
    path.write_text(yaml.safe_dump(cfg))
    gate = _dagster("gate", path, home, data_dir)
    assert gate.returncode == 0, gate.stderr[-3000:]
    launched = _dg_launch("gate", path, home, data_dir)
    assert launched.returncode == 0, launched.stderr[-3000:]

    # a service that cannot be reached: run_eval isolates it, but the evaluate job still fails
    cfg["services"]["dead"] = {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "dead"}
    path.write_text(yaml.safe_dump(cfg))
    ev = _dagster("evaluate", path, home, data_dir)
    assert ev.returncode != 0, ev.stderr[-3000:]
    assert "gsm8k/dead: cannot reach the model endpoint" in ev.stderr, ev.stderr[-3000:]
