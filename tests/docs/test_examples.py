"""Every YAML config in the docs and the README plans (`nel eval run CONFIG --dry-run`), and
the ones that target a plain OpenAI endpoint run end to end against the reference server.

So an example cannot rot: a renamed key, a removed benchmark or a wrong nesting fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.doc_examples import Example, yaml_examples
from tests.support.cli import run_nel

EXAMPLES = yaml_examples()
CHECKED = [e for e in EXAMPLES if not e.fragment]
# The values the examples read from the environment (`${OPENAI_API_KEY}`, `api_key_env`).
EXAMPLE_ENV = {"OPENAI_API_KEY": "sk-docs-example", "MY_API_KEY": "sk-docs-example",
               "HF_HUB_OFFLINE": "1", "NEL_DAEMON": "off"}


def _env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    return {**EXAMPLE_ENV, "NEL_DATA_DIR": str(data_dir),
            "NEL_USER_CONFIG": str(tmp_path / "user-config.yaml"),
            "NEL_RUNS_DIR": str(tmp_path / "runs")}


def test_the_docs_have_many_checked_examples() -> None:
    # A parser that found nothing would pass every check below vacuously.
    assert len(CHECKED) >= 15, [e.where for e in CHECKED]
    assert sum(e.fragment for e in EXAMPLES) <= 3, [e.where for e in EXAMPLES if e.fragment]


def test_every_example_has_a_small_max_problems() -> None:
    """A copied example must not start a full run by accident: each benchmark says how many
    problems it takes, and the docs say how to run the whole set."""
    for ex in CHECKED:
        cfg = yaml.safe_load(ex.text)
        for bench in cfg.get("benchmarks") or []:
            if str(bench["name"]).startswith("container://"):
                assert bench.get("params", {}).get("limit_samples"), ex.where  # the harness picks
                continue
            assert 0 < int(bench.get("max_problems", 0)) <= 200, (ex.where, bench["name"])
        assert "remove" in ex.text or "full" in ex.text, f"{ex.where}: say how to run the full set"


@pytest.mark.parametrize("ex", CHECKED, ids=[e.where for e in CHECKED])
def test_example_plans(ex: Example, tmp_path: Path, data_dir: Path) -> None:
    cfg = tmp_path / "example.yaml"
    cfg.write_text(ex.text)
    p = run_nel("eval", "run", str(cfg), "--dry-run", "-o", str(tmp_path / "out"),
                env=_env(tmp_path, data_dir), timeout=120)
    if ex.needs is None:
        assert p.returncode == 0, f"{ex.where} does not plan:\n{p.stdout}\n{p.stderr}"
        assert "would run" in p.stdout, p.stdout
    elif p.returncode != 0:  # what it needs is missing here: one line saying so
        assert p.returncode in (2, 4), (ex.where, p.returncode, p.stderr)
        needed = [n.strip() for n in ex.needs.split("|")]  # any of them may be the missing one
        assert any(n in p.stderr for n in needed), (ex.where, p.stderr)
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "out").exists(), "a dry run writes nothing"


def _plain_openai(cfg: dict[str, Any]) -> bool:
    """Only `type: api` services, built-in benchmarks with the simple solver, no sandbox,
    judge or cluster: what the reference server can stand in for."""
    services = cfg.get("services") or {}
    if not services or any(s.get("type", "api") != "api" or s.get("interceptors")
                           for s in services.values()):
        return False
    if cfg.get("sandboxes") or cfg.get("cluster", {}).get("type", "local") != "local":
        return False
    for b in cfg.get("benchmarks") or []:
        solver = b.get("solver") or {}
        metrics = (b.get("scoring") or {}).get("metrics") or []
        if (b.get("sandbox") or solver.get("type", "simple") != "simple"
                or any(m.get("type") == "judge" for m in metrics) or "://" in b["name"]):
            return False
    return True


RUNNABLE = [e for e in CHECKED if e.needs is None and _plain_openai(yaml.safe_load(e.text))]


def test_some_examples_run_end_to_end() -> None:
    assert len(RUNNABLE) >= 2, [e.where for e in RUNNABLE]


@pytest.mark.parametrize("ex", RUNNABLE, ids=[e.where for e in RUNNABLE])
def test_example_runs_against_the_reference_server(ex: Example, tmp_path: Path, data_dir: Path,
                                                   reference_server) -> None:
    url = reference_server()
    cfg = yaml.safe_load(ex.text)
    for service in cfg["services"].values():
        service["url"] = url  # the example's endpoint, played by the reference server
    cfg["output"] = {"dir": str(tmp_path / "out")}
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = run_nel("eval", "run", str(path), "--no-progress", env=_env(tmp_path, data_dir), timeout=300)
    assert p.returncode == 0, f"{ex.where}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    for bench in cfg["benchmarks"]:
        assert list((tmp_path / "out" / bench["name"]).glob("eval-*.json")), (ex.where, bench["name"])
