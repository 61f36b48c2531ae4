"""`solver.type: openclaw` in a config: what nel honours, and what it refuses in one line
naming the key, before any request (the CLI itself runs in
tests/dagster_project/test_openclaw_e2e.py)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from nel_resources.specs import solver_fingerprint


def config(tmp_path: Path, **bench: Any) -> Path:
    # A stand-in executable: these checks never run it (the e2e tests run the real CLI).
    cli = tmp_path / "openclaw"
    cli.write_text("#!/bin/sh\nexit 1\n")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    solver = {"type": "openclaw", "service": "m", "openclaw_bin": str(cli),
              **bench.pop("solver", {})}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump({
        "services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
        "benchmarks": [{"name": "gsm8k", "solver": solver, **bench}],
        "output": {"dir": str(tmp_path / "out")}}))
    return path


def test_the_honoured_keys_pass_and_reach_the_fingerprint(tmp_path: Path) -> None:
    cfg = load_config(config(tmp_path, solver={"thinking": "off", "max_concurrent": 2,
                                               "context_window": 8192,
                                               "idle_timeout_seconds": 60}))
    check_supported(cfg)
    fp = solver_fingerprint(cfg.benchmarks[0].solver)
    assert fp is not None and fp["type"] == "openclaw" and fp["thinking"] == "off"
    assert fp["context_window"] == 8192


def test_what_nel_does_not_honour_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        check_supported(load_config(config(tmp_path, sandbox={"type": "local"})))
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1
    # nel puts OpenClaw into docker (mounted) and ecs_fargate (its image) sandboxes only
    assert "key benchmarks.0.sandbox.type: the 'openclaw' solver in a local sandbox" in msg


def test_web_search_needs_its_key_by_name_unless_preflight_is_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ConfigError) as exc:
        check_supported(load_config(config(tmp_path, solver={"web_search_provider": "tavily"})))
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1 and "key benchmarks.0.solver.web_search_provider" in msg
    assert "needs TAVILY_API_KEY set in the environment" in msg
    # NeMo Evaluator's skip_preflight skips the check (a run without the key fails per sample)
    check_supported(load_config(config(tmp_path, solver={"web_search_provider": "tavily",
                                                         "skip_preflight": True})))
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-x")
    check_supported(load_config(config(tmp_path, solver={"web_search_provider": "tavily"})))


def test_config_path_must_be_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        check_supported(load_config(config(tmp_path, solver={"config_path": str(tmp_path / "no.json")})))
    assert "key benchmarks.0.solver.config_path" in str(exc.value)
    assert "is not a file" in str(exc.value)
    (tmp_path / "oc.json").write_text("{}")
    check_supported(load_config(config(tmp_path, solver={"config_path": str(tmp_path / "oc.json")})))


def test_a_cli_that_is_not_there_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "openclaw"
    with pytest.raises(ConfigError) as exc:
        check_supported(load_config(config(tmp_path, solver={"openclaw_bin": str(missing)})))
    msg = str(exc.value)
    assert "key benchmarks.0.solver.openclaw_bin" in msg and f"`{missing}` is not on PATH" in msg
    assert "make peers" in msg


def test_the_users_openclaw_json_content_reaches_the_fingerprint(tmp_path: Path) -> None:
    user = tmp_path / "oc.json"
    user.write_text('{"logging": {"level": "info"}}')
    path = config(tmp_path, solver={"config_path": str(user)})
    before = solver_fingerprint(load_config(path).benchmarks[0].solver)
    user.write_text('{"logging": {"level": "debug"}}')  # same path, other settings: a rerun
    after = solver_fingerprint(load_config(path).benchmarks[0].solver)
    assert before is not None and after is not None
    assert before["config_path"] == after["config_path"] == str(user)
    assert before["config_sha256"] != after["config_sha256"]
