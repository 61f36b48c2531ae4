"""The `custom` sandbox: a user's class named by `class_path`, checked when the config is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes import make_factory
from nel_resources.sandboxes.base import ExecResult, SandboxError, SandboxSpec, running


class RecordingSandbox:
    """A user sandbox that runs nothing: it answers every command with its own argv."""

    def __init__(self, spec: SandboxSpec, *, prefix: str = "") -> None:
        self._spec, self.prefix = spec, prefix
        self.log: list[str] = []

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    async def start(self) -> None:
        self.log.append("start")

    async def exec(self, command: str | list[str], timeout_sec: float = 180, **_: object) -> ExecResult:
        return ExecResult(stdout=f"{self.prefix}{command}", stderr="", return_code=0)

    async def upload(self, local_path: Path, remote_path: str) -> None: ...

    async def download(self, remote_path: str, local_path: Path) -> None: ...

    async def stop(self) -> None:
        self.log.append("stop")


def test_a_sandbox_class_is_built_per_problem_with_the_block_config() -> None:
    cfg = SandboxConfig(type="custom", class_path=f"{__name__}:RecordingSandbox",
                        config={"prefix": "ran: "})
    factory = make_factory(cfg)
    sb = factory.create(SandboxSpec())

    async def go() -> str:
        async with running(sb):
            return (await sb.exec("echo 1")).stdout

    assert asyncio.run(go()) == "ran: echo 1"
    assert isinstance(sb, RecordingSandbox) and sb.log == ["start", "stop"]


def test_a_class_that_is_no_sandbox_is_refused_with_the_config(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="implements neither"):
        make_factory(SandboxConfig(type="custom", class_path="pathlib:Path"))
    path = tmp_path / "c.yaml"
    path.write_text("services:\n  model: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', "
                    "model: m}\nbenchmarks:\n  - name: gsm8k\n    sandbox:\n      type: custom\n"
                    "      class_path: no_such_module.Box\n")
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(path))
    assert str(err.value).startswith(
        f"{path}:7: key benchmarks.0.sandbox.class_path: custom sandbox cannot run here: custom "
        "sandbox class_path 'no_such_module.Box' cannot be imported: No module named")
