"""The `every_eval_ever` exporter: a real run's bundle becomes an Every Eval Ever record that the
real `every-eval-ever` 0.3.0 package (its peer venv, Python 3.12) validates with its own
validator and pydantic models and reads back; re-export rewrites the same files (its duplicate
checker finds none); reached from a config's `output.export` and from `nel export --dest`;
a failed export keeps the results."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for
from tests.support.peers import peer_eee_python

N = 6
RIGHT = {0, 2, 3}
REPEATS = 2

# Runs in the peer's Python: its validator on every file (schema + datastore checks, strict
# JSON), its duplicate checker over the folder, then its pydantic models read the files back.
_READ = """
import json, sys, io, contextlib
from pathlib import Path
from every_eval_ever.validate import main as validate
from every_eval_ever.check_duplicate_entries import main as duplicates
from every_eval_ever.eval_types import EvaluationLog
from every_eval_ever.instance_level_types import InstanceLevelEvaluationLog
files = sorted(str(p) for p in Path(sys.argv[1]).rglob("*") if p.is_file())
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = validate([*files, "--format", "json"])
report = json.loads(out.getvalue())
with contextlib.redirect_stdout(io.StringIO()):
    dup = duplicates([sys.argv[1]])
logs = []
for f in files:
    if f.endswith(".json"):
        log = EvaluationLog.model_validate_json(Path(f).read_text())
        logs.append({"file": f, "id": log.evaluation_id, "model": log.model_info.id,
                     "library": log.eval_library.name,
                     "samples_path": log.detailed_evaluation_results.file_path,
                     "results": [{"id": r.evaluation_result_id, "score": r.score_details.score,
                                  "se": r.score_details.uncertainty.standard_error.value,
                                  "ci": [r.score_details.uncertainty.confidence_interval.lower,
                                         r.score_details.uncertainty.confidence_interval.upper],
                                  "n": r.score_details.uncertainty.num_samples}
                                 for r in log.evaluation_results]})
rows = [InstanceLevelEvaluationLog.model_validate_json(line) for f in files if f.endswith(".jsonl")
        for line in Path(f).read_text().splitlines() if line.strip()]
print(json.dumps({"status": status, "report": report, "duplicates": dup, "logs": logs,
                  "rows": [{"eval": r.evaluation_id, "result": r.evaluation_result_id, "sample": r.sample_id,
                            "score": r.evaluation.score, "correct": r.evaluation.is_correct,
                            "reference": r.input.reference, "input": r.input.raw, "output": r.output.raw[0],
                            "extracted": r.answer_attribution[0].extracted_value,
                            "repeat": r.metadata["repeat"]} for r in rows]}))
"""


def _read_with_eee(root: Path) -> dict:
    p = subprocess.run([str(peer_eee_python()), "-c", _READ, str(root)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _check(got: dict, rows: list[dict]) -> None:
    assert got["status"] == 0, got["report"]  # 0: no error and no warning
    assert all(r["valid"] and not r["warnings"] for r in got["report"]) and len(got["report"]) == 2
    assert got["duplicates"] == 0
    (log,) = got["logs"]
    assert log["model"] == "ref-model" and log["library"] == "nel"
    assert log["id"].startswith("gsm8k/ref-model/")
    head = log["results"][0]
    assert head["id"] == "gsm8k:score" and head["score"] == pytest.approx(len(RIGHT) / N)
    assert head["ci"][0] < head["score"] < head["ci"][1] and head["se"] > 0 and head["n"] == N
    assert {r["id"] for r in log["results"]} >= {"gsm8k:pass_at_1", "gsm8k:pass_at_2", "gsm8k:maj_at_1"}
    assert len(got["rows"]) == N * REPEATS
    for s in got["rows"]:
        assert s["eval"] == log["id"] and s["result"] == "gsm8k:score"
        row = next(r for r in rows if r["question"] in s["input"])
        gold = row["answer"].split("####")[-1].strip().replace(",", "")
        assert s["reference"] == [gold] and s["output"].endswith(s["extracted"])
        assert s["correct"] == (s["extracted"] == gold) and s["score"] == float(s["correct"])
    assert sorted(s["repeat"] for s in got["rows"]) == [0] * N + [1] * N
    assert sum(s["correct"] for s in got["rows"]) == len(RIGHT) * REPEATS


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def gsm8k_run(tmp_path: Path, reference_server, data_dir: Path) -> tuple[Path, list[dict], dict]:
    peer_eee_python()  # fail (CI) or skip before running anything without the peer
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, RIGHT))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: {url}\n    model: ref-model\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {N}\n    repeats: {REPEATS}\n"
                   f"    shuffle_seed: null\noutput:\n  dir: {tmp_path / 'out'}\n  export: [every_eval_ever]\n")
    return cfg, rows, {"NEL_DATA_DIR": str(data_dir)}


def test_config_export_is_valid_every_eval_ever_and_re_export_is_idempotent(gsm8k_run, tmp_path: Path) -> None:
    cfg, rows, env = gsm8k_run
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    assert p.returncode == 0, p.stderr
    root = tmp_path / "out" / "gsm8k" / "every_eval_ever"
    before = _files(root)
    assert len(before) == 2 and all(k.startswith("data/gsm8k/local/ref-model/") for k in before)
    _check(_read_with_eee(root), rows)
    # the same evaluation exported again, by `nel export` and by a rerun: the same two files
    p = run_nel("export", str(tmp_path / "out"), "--dest", "every_eval_ever", env=env)
    assert p.returncode == 0, p.stderr
    assert _files(root) == before
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env).returncode == 0
    assert _files(root) == before
    assert _read_with_eee(root)["duplicates"] == 0


def test_nel_export_dest_every_eval_ever(gsm8k_run, tmp_path: Path) -> None:
    cfg, rows, env = gsm8k_run
    cfg.write_text(cfg.read_text().replace("  export: [every_eval_ever]\n", ""))  # a run without it
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env).returncode == 0
    assert not (tmp_path / "out" / "gsm8k" / "every_eval_ever").exists()
    dest = tmp_path / "eee"
    p = run_nel("export", str(tmp_path / "out"), "--dest", "every_eval_ever", "--output-dir", str(dest),
                "-o", "developer=acme", "-o", "evaluator_relationship=first_party", env=env)
    assert p.returncode == 0, p.stderr
    assert [k.rsplit("/", 1)[0] for k in _files(dest)] == ["data/gsm8k/acme/ref-model"] * 2
    _check(_read_with_eee(dest), rows)
    # a bad setting: one line naming it, exit 1 (the command cannot do its work), nothing written
    bad = run_nel("export", str(tmp_path / "out"), "--dest", "every_eval_ever", "--output-dir",
                  str(tmp_path / "bad"), "-o", "evaluator_relationship=me", env=env)
    assert bad.returncode == 1 and "evaluator_relationship 'me': write one of" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()


def test_a_failed_export_keeps_the_results(gsm8k_run, tmp_path: Path) -> None:
    cfg, rows, env = gsm8k_run
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the export folder should go")
    cfg.write_text(cfg.read_text() + f"  export_config:\n    every_eval_ever:\n      output_dir: {blocker}\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    assert p.returncode == 0, p.stderr
    assert "every_eval_ever export failed:" in p.stderr and "the results are kept in" in p.stderr
    bench = tmp_path / "out" / "gsm8k"
    assert (bench / "results.jsonl").is_file() and list(bench.glob("eval-*.json"))
    # `nel export` retries it elsewhere, from the kept results
    dest = tmp_path / "retry"
    assert run_nel("export", str(tmp_path / "out"), "--dest", "every_eval_ever", "--output-dir", str(dest),
                   env=env).returncode == 0
    _check(_read_with_eee(dest), rows)
    # `nel export` into the blocked folder fails with status 1 and the same line
    again = run_nel("export", str(tmp_path / "out"), "--dest", "every_eval_ever", "--output-dir", str(blocker), env=env)
    assert again.returncode == 1 and "every_eval_ever export failed:" in again.stderr
