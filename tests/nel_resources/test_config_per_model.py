"""NeMo Evaluator's one-entry-per-model form folds into one entry listing the services."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.config import ConfigError, load_config
from nel_resources.specs import resolve

HEAD = ("services:\n"
        "  base: {type: api, url: 'http://127.0.0.1:9/v1', model: base}\n"
        "  cand: {type: api, url: 'http://127.0.0.1:9/v1', model: cand}\n"
        "benchmarks:\n")


def _load(tmp_path: Path, body: str):
    p = tmp_path / "c.yaml"
    p.write_text(HEAD + body)
    return load_config(p)


def test_entries_differing_only_in_service_become_one_benchmark(tmp_path: Path) -> None:
    cfg = _load(tmp_path,
                "  - {name: gsm8k, max_problems: 2, solver: {service: base}}\n"
                "  - {name: mmlu, max_problems: 2, solver: {service: base}}\n"
                "  - {name: gsm8k, max_problems: 2, solver: {service: cand}}\n")
    assert [(b.name, b.service) for b in cfg.benchmarks] == [("gsm8k", ["base", "cand"]),
                                                             ("mmlu", "base")]
    resolved = resolve(cfg)
    gsm = resolved.benchmarks[0]
    assert [r.model for r in gsm.runs] == ["base", "cand"]
    # the same per-run specs as nel's own spelling, so the same fingerprints (stale-only reruns)
    own = resolve(_load(tmp_path, "  - {name: gsm8k, max_problems: 2, service: [base, cand]}\n"))
    assert [r.fingerprint for r in gsm.runs] == [r.fingerprint for r in own.benchmarks[0].runs]
    # a dumped config reloads to the same single entry
    again = load_config(data=cfg.model_dump(mode="json"))
    assert [(b.name, b.service) for b in again.benchmarks] == [("gsm8k", ["base", "cand"]),
                                                               ("mmlu", "base")]


def test_lines_still_name_the_entry_in_the_file(tmp_path: Path) -> None:
    cfg = _load(tmp_path,
                "  - {name: gsm8k, solver: {service: base}}\n"
                "  - {name: gsm8k, solver: {service: cand}}\n"
                "  - {name: mmlu, solver: {service: base}}\n")
    assert cfg.line_of("benchmarks", 1, "name") == 7  # mmlu, the third entry in the file


def test_entries_with_other_differences_are_one_line_naming_the_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "  - {name: gsm8k, max_problems: 2, solver: {service: base}}\n"
                        "  - {name: gsm8k, max_problems: 5, repeats: 2, solver: {service: cand}}\n")
    msg = str(err.value)
    assert "\n" not in msg and "c.yaml:6" in msg
    assert "appears twice in the config (benchmarks[0] and benchmarks[1]) with different " \
           "max_problems, repeats" in msg


def test_the_same_service_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"appears twice in the config for service 'base'"):
        _load(tmp_path, "  - {name: gsm8k, solver: {service: base}}\n"
                        "  - {name: gsm8k, service: [cand, base]}\n")
