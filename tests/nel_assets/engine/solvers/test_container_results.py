"""Parsing what a legacy harness leaves in /results (no Docker): the eval-factory `tasks` and
`groups` layouts and the flat one, results.json, per-sample files and their verdict keys,
eval_factory_metrics.json, and one-line errors for missing, unparsable or scoreless files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.errors import NelError
from nel_assets.engine.solvers.container import build_run_config, endpoint_url, store_rows
from nel_assets.engine.solvers.container_results import read_results


def write(d: Path, name: str, text: str) -> None:
    (d / name).parent.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)


def test_tasks_layout_with_stats_metrics_and_samples(tmp_path: Path) -> None:
    raw = {"config": {"params": {"limit_samples": 50, "extra": {"num_repeats": 3}}},
           "results": {"tasks": {"ifeval": {"metrics": {
               "prompt_level": {"scores": {"strict": {"value": 0.5, "stats": {"stderr": 0.1}},
                                           "loose": {"value": 0.625}}},
               "inst_level": {"scores": {"strict": {"value": "n/a"}}}}}}}}
    write(tmp_path, "results.yml", yaml.safe_dump(raw, sort_keys=False))
    write(tmp_path, "eval_factory_metrics.json",
          json.dumps({"response_stats": {"count": 150, "avg_latency_ms": 12.5}}))
    write(tmp_path, "eval-results/ifeval/output.jsonl",
          '{"passed": true, "question": "q0"}\n\n{"score": 0.25, "problem_idx": 7}\n{"text": "x"}\n')
    r = read_results(tmp_path)
    assert r.scores == {"ifeval/prompt_level/strict": {"value": 0.5, "stats": {"stderr": 0.1}},
                        "ifeval/prompt_level/loose": {"value": 0.625}}
    assert r.headline()[0] == "ifeval/prompt_level/strict"
    assert r.samples == 50 and r.repeats == 3 and r.response_stats["count"] == 150
    rows = store_rows(r, benchmark="b", model="m", model_id="mid", run_id="r")
    assert [(x["problem_idx"], x["reward"], x["error"] is None) for x in rows] == [
        (0, 1.0, True), (7, 0.25, True), (2, None, False)]
    assert rows[0]["prompt"] == "q0" and rows[2]["failure_category"] == "error"


def test_groups_and_flat_layouts_and_results_json(tmp_path: Path) -> None:
    write(tmp_path / "g", "results.yml", yaml.safe_dump({"results": {"groups": {"mmlu": {"metrics": {
        "acc": {"scores": {"micro": {"value": 0.7, "stats": {"count": 100}}}}}}}}}))
    g = read_results(tmp_path / "g")
    assert g.scores == {"mmlu/acc/micro": {"value": 0.7, "stats": {"count": 100}}} and g.samples == 100
    write(tmp_path / "f", "results.json", json.dumps({"metrics": {"acc": 0.8, "flag": True},
                                                     "samples": 12}))
    f = read_results(tmp_path / "f")
    assert f.scores == {"acc": {"value": 0.8}} and f.samples == 12 and f.rows == []


@pytest.mark.parametrize(("files", "says"), [
    ({}, "the harness wrote no results.yml (nor results.json) into /results"),
    ({"results.yml": "a: [1, 2\n"}, "the harness's results file does not parse: "),
    ({"results.yml": "- 1\n- 2\n"}, "the harness's results file is not a mapping"),
    ({"results.yml": "results: {tasks: {}}\n"}, "the harness's results file holds no score"),
    ({"results.yml": "metrics: {acc: 1}\n", "eval-results/t/output.jsonl": "{oops\n"},
     "harness per-sample file output.jsonl line 1 is not JSON"),
], ids=["missing", "unparsable", "not-a-mapping", "no-score", "bad-sample-line"])
def test_unusable_results_are_one_line_errors(tmp_path: Path, files: dict[str, str], says: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(NelError) as exc:
        read_results(tmp_path)
    assert str(exc.value).startswith(says) and "\n" not in str(exc.value)


def test_run_config_names_the_key_variable_only_when_there_is_a_key() -> None:
    url = endpoint_url("http://127.0.0.1:8000/v1/chat/completions", "completions")
    assert url == "http://127.0.0.1:8000/v1/completions"
    keyless = build_run_config("t", url=url, model_id="m", endpoint_type="completions")
    assert keyless == {"config": {"type": "t", "output_dir": "/results"},
                       "target": {"api_endpoint": {"url": url, "model_id": "m", "type": "completions"}}}
    keyed = build_run_config("t", url=url, model_id="m", endpoint_type="chat", params={"x": 1},
                             adapter_config={"a": True}, with_api_key=True)
    api = keyed["target"]["api_endpoint"]
    assert api["api_key_name"] == "NEMO_API_KEY" and api["adapter_config"] == {"a": True}
    assert keyed["config"]["params"] == {"x": 1}
