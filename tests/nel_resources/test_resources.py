"""The Dagster sandbox resource: the block as the config wrote it, secrets kept out."""

from __future__ import annotations

import asyncio

from nel_resources.config import SandboxConfig
from nel_resources.resources import SandboxResource


def test_the_block_round_trips_with_what_was_set_and_without_its_env() -> None:
    cfg = SandboxConfig.model_validate({"type": "docker", "image": "img", "network": "bridge",
                                        "concurrency": 3,
                                        "container_env": {"TOKEN": "s3cret-value"}})
    res = SandboxResource.from_config("humaneval", cfg)
    assert "s3cret-value" not in res.sandbox_json  # the Dagster-visible config
    back = res.sandbox()
    assert back.container_env == {"TOKEN": "s3cret-value"}
    assert (back.image, back.network, back.concurrency) == ("img", "bridge", 3)
    # written at its default value is still "written" (docker reads an unset network as none)
    assert "network" in back.model_fields_set
    unset = SandboxResource.from_config("b2", SandboxConfig.model_validate({"type": "docker"})).sandbox()
    assert "network" not in unset.model_fields_set


def test_open_makes_the_configured_factory() -> None:
    res = SandboxResource.from_config("humaneval", SandboxConfig.model_validate(
        {"type": "local", "concurrency": 2}))

    async def main() -> int:
        async with res.open() as factory:
            return factory.concurrency

    assert asyncio.run(main()) == 2
