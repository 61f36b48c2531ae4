"""A launched worker's specs from the run's saved config: the BYOB module a benchmark names
is loaded before resolving (the benchmark is unknown without it), the output directory and
the cluster come from the file, and a file that is not there is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.run_settings import load_saved_specs

MODULE = '''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer


@benchmark(name="saved_specs_demo", dataset="rows.jsonl", prompt="Say {word}.", target_field="word")
@scorer
def check(sample: ScorerInput) -> dict:
    return exact_match(sample)
'''


def test_a_saved_config_resolves_with_its_byob_module(tmp_path: Path) -> None:
    module = tmp_path / "demo_bench.py"
    module.write_text(MODULE)
    (tmp_path / "rows.jsonl").write_text('{"word": "yes"}\n')
    out = tmp_path / "out"
    path = tmp_path / "nel-config.yaml"
    path.write_text(yaml.safe_dump({
        "services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
        "benchmarks": [{"name": "saved_specs_demo", "module": str(module), "shards": 2}],
        "cluster": {"type": "subprocess"},
        "output": {"dir": str(out)},
    }))
    resolved = load_saved_specs(str(path))
    assert [b.name for b in resolved.benchmarks] == ["saved_specs_demo"]
    assert resolved.benchmarks[0].shards == 2
    assert resolved.output_dir == str(out)
    assert resolved.cluster.type == "subprocess"
    assert resolved.module_paths == (str(module),)  # what a cluster's workers must read


def test_a_missing_saved_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NelError) as e:
        load_saved_specs(str(tmp_path / "nope.yaml"))
    assert "\n" not in str(e.value) and "nope.yaml" in str(e.value)
