"""No network unless the config names one: for every sandbox type, through every way a
sandbox block reaches nel (`nel eval run` with a config, with `-b NAME`, the Dagster
definitions, `nel serve --sandbox`, the Python API), the block nel runs with says `none`,
and a docker block becomes a `--network none` factory.

The drill that found the hole: `nel eval run` validated `cfg.model_dump()` again, which
marked the old default (`bridge`) as written, and the docker sandbox honoured it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from nel_resources.config import ConfigError, SandboxConfig
from nel_resources.sandboxes.factory import SANDBOX_TYPES, make_factory

#: The least each type needs to be a valid block (no `network` anywhere).
BLOCKS: dict[str, dict[str, Any]] = {
    "local": {"type": "local"},
    "docker": {"type": "docker", "image": "localdebian:bookworm-py"},
    "slurm": {"type": "slurm"},
    "apptainer": {"type": "apptainer", "image": "docker://python:3.11"},
    "ecs_fargate": {"type": "ecs_fargate", "image": "python:3.11"},
    "custom": {"type": "custom", "class_path": "some.module:Sandbox"},
}


def test_every_type_has_a_block_here() -> None:
    assert set(BLOCKS) == set(SANDBOX_TYPES)


def _write_config(tmp_path: Path, block: dict[str, Any], *, proxy: bool = False) -> Path:
    svc: dict[str, Any] = {"type": "api", "url": "http://127.0.0.1:9/v1/chat/completions",
                           "model": "m"}
    if proxy:
        svc["proxy"] = {"verbose": True}
    cfg = {"services": {"m": svc},
           "sandboxes": {"code": block},
           "benchmarks": [{"name": "humaneval", "sandbox": "code"},
                          {"name": "gsm8k", "sandbox": dict(block)}],
           "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _from_eval_run(path: Path, *extra: str) -> list[SandboxConfig]:
    from dagster_project.cli.commands_eval import config_from_args
    from dagster_project.cli.main import build_parser

    args = build_parser().parse_args(["eval", "run", str(path), *extra])
    cfg = config_from_args(args)
    return [b.sandbox for b in cfg.benchmarks if b.sandbox is not None]


def _from_definitions(path: Path) -> list[SandboxConfig]:
    from dagster_project.config_loading import load_definitions_config
    from dagster_project.definitions import build_definitions
    from nel_resources.resources import SandboxResource

    cfg, out = load_definitions_config(str(path))
    try:
        defs = build_definitions(cfg, out)
    except ConfigError as exc:
        # The definitions refuse what a run refuses (one resolution path): a type that cannot
        # run on this machine (no apptainer, no AWS, a class that is not importable) is one
        # line naming its key; the blocks the definitions loaded still say `none`.
        assert "\n" not in str(exc) and "key sandboxes.code." in str(exc), exc
        return [b.sandbox for b in cfg.benchmarks if b.sandbox is not None]
    found = [r.sandbox() for r in (defs.resources or {}).values() if isinstance(r, SandboxResource)]
    assert found, "the definitions hold no sandbox resource"
    return found


def _from_serve(block: dict[str, Any], tmp_path: Path) -> list[SandboxConfig]:
    from dagster_project.cli.main import build_parser
    from dagster_project.cli.sandbox_flags import sandbox_config

    rest = {k: v for k, v in block.items() if k != "type"}
    flags = ["serve", "-b", "humaneval", "--sandbox", block["type"]]
    if rest:
        f = tmp_path / "sandbox.yaml"
        f.write_text(yaml.safe_dump(rest))
        flags += ["--sandbox-config", str(f)]
    got = sandbox_config(build_parser().parse_args(flags))
    assert got is not None
    return [got]


class PeerSandboxConfig(BaseModel):
    """A NeMo Evaluator-style sandbox model, whose default network is `bridge`."""

    type: str
    image: str | None = None
    class_path: str | None = None
    network: str = "bridge"


def _from_python_api(block: dict[str, Any]) -> list[SandboxConfig]:
    from nel_assets.engine.nemo.evaluation_api import _sandbox_block

    return [_sandbox_block(None, {"sandbox": dict(block)}),
            _sandbox_block(SandboxConfig.model_validate(block), {}),
            _sandbox_block(PeerSandboxConfig(**block), {})]


ENTRY_POINTS = ["eval_run_config", "eval_run_bench", "eval_run_proxy", "definitions", "serve",
                "python_api"]


@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_no_network_by_default_everywhere(kind: str, entry: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    block = BLOCKS[kind]
    if entry == "eval_run_config":
        got = _from_eval_run(_write_config(tmp_path, block))
    elif entry == "eval_run_bench":
        got = _from_eval_run(_write_config(tmp_path, block), "-b", "humaneval")
    elif entry == "eval_run_proxy":
        got = _from_eval_run(_write_config(tmp_path, block, proxy=True), "--max-problems", "2")
    elif entry == "definitions":
        got = _from_definitions(_write_config(tmp_path, block))
    elif entry == "serve":
        got = _from_serve(block, tmp_path)
    else:
        got = _from_python_api(block)
    assert got
    for cfg in got:
        assert cfg.type == kind and cfg.network == "none", (entry, cfg.network)
        if kind == "docker":
            assert make_factory(cfg).network == "none", entry  # type: ignore[attr-defined]


def test_a_written_network_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    block = {**BLOCKS["docker"], "network": "bridge"}
    for cfg in _from_eval_run(_write_config(tmp_path, block)):
        assert make_factory(cfg).network == "bridge"  # type: ignore[attr-defined]


def test_a_proxy_s_unwritten_settings_stay_unset_through_eval_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same re-validation made a `proxy:` block's defaults look written, so its
    `request_timeout` and `max_retries` replaced the service's own."""
    from dagster_project.cli.commands_eval import config_from_args
    from dagster_project.cli.main import build_parser

    monkeypatch.chdir(tmp_path)
    path = _write_config(tmp_path, BLOCKS["local"], proxy=True)
    cfg = config_from_args(build_parser().parse_args(["eval", "run", str(path)]))
    proxy = cfg.services["m"].proxy
    assert proxy is not None and proxy.model_fields_set == {"verbose"}
