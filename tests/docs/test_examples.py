"""Every YAML config in the docs and the README plans (`nel eval run CONFIG --dry-run`), and
every one that needs no cluster or agent program runs end to end against reference servers
(solver and judge) and the real sandboxes.

So an example cannot rot: a renamed key, a removed benchmark or a wrong nesting fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.doc_examples import Example, yaml_examples
from tests.support.cli import run_nel
from tests.support.docker_engine import start_docker_engine

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
    out = tmp_path / "out"
    # a dry run writes nothing but a SLURM config's sbatch scripts (as NeMo Evaluator's)
    assert not out.exists() or [q.name for q in out.iterdir()] == ["slurm"], "a dry run writes nothing"
    if out.exists():
        assert "type: slurm" in ex.text and "wrote " in p.stdout, p.stdout


def _runs_here(cfg: dict[str, Any]) -> bool:
    """What the reference server can stand in for, on this machine alone: `type: api`
    services (solvers and judges), built-in benchmarks with the simple solver, local or docker
    sandboxes, no cluster (the cluster examples plan above; their launchers have their own
    end-to-end tests against the real SLURM, Docker and Ray)."""
    services = cfg.get("services") or {}
    if not services or any(s.get("type", "api") != "api" or s.get("interceptors")
                           for s in services.values()):
        return False
    if cfg.get("cluster", {}).get("type", "local") != "local":
        return False
    if any(sb.get("type") not in ("local", "docker") for sb in (cfg.get("sandboxes") or {}).values()):
        return False
    for b in cfg.get("benchmarks") or []:
        solver = b.get("solver") or {}
        if solver.get("type", "simple") != "simple" or "://" in b["name"]:
            return False
    return True


def _judge_services(cfg: dict[str, Any]) -> set[str]:
    """Services that grade (a judge metric's `service`, or `role: judge`)."""
    named = {m.get("service") for b in cfg.get("benchmarks") or []
             for m in (b.get("scoring") or {}).get("metrics") or [] if m.get("type") == "judge"}
    return {n for n, s in (cfg.get("services") or {}).items() if n in named or s.get("role") == "judge"}


RUNNABLE = [e for e in CHECKED if e.needs is None and _runs_here(yaml.safe_load(e.text))]


def test_the_examples_that_can_run_here_run_end_to_end() -> None:
    # every example that needs no cluster and no agent program: judges and sandboxes included
    assert len(RUNNABLE) >= 7, [e.where for e in RUNNABLE]


@pytest.mark.parametrize("ex", RUNNABLE, ids=[e.where for e in RUNNABLE])
def test_example_runs_against_the_reference_server(ex: Example, tmp_path: Path, data_dir: Path,
                                                   reference_server) -> None:
    url = reference_server()
    cfg = yaml.safe_load(ex.text)
    judges = _judge_services(cfg)
    # a grader of its own: a score for NeMo Evaluator's rubric (and a custom rubric that
    # asks for JSON), the letter "A" (correct) for nel's graders
    judge_url = reference_server(default_content="A", answers=[
        {"match": "Provide your score as a JSON object", "content": '{"score": 5, "reasoning": "ok"}'},
        {"match": "Reply as JSON", "content": '{"score": 9}'}]) if judges else None
    for name, service in cfg["services"].items():
        # the example's endpoints, played by reference servers
        service["url"] = judge_url if name in judges else url
    cfg["output"] = {"dir": str(tmp_path / "out")}
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = _env(tmp_path, data_dir)
    if any(sb.get("type") == "docker" for sb in (cfg.get("sandboxes") or {}).values()):
        env["DOCKER_HOST"] = start_docker_engine()  # the real engine, its image built locally
    p = run_nel("eval", "run", str(path), "--no-progress", env=env, timeout=300)
    assert p.returncode == 0, f"{ex.where}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    for bench in cfg["benchmarks"]:
        assert list((tmp_path / "out" / bench["name"]).glob("eval-*.json")), (ex.where, bench["name"])
