"""The `tool_calling` solver sends a seed's images too (chat and Responses), with the
configured detail, and its trajectory names them by hash: the reference server answers from
the image it decoded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import SeedResult
from benchmarks.images import load_image
from nel_assets.engine.solvers.base import SolveContext, ToolOutcome
from nel_assets.engine.solvers.tool_calling import ToolCallingSolver
from nel_resources.model_client import ModelClient
from nel_resources.reference_server import start_reference_server
from tests.support import server_stats
from tests.support.vlmevalkit_tsv import draw


class _Echo:
    """One tool the model may call (it does not need to: the answer is in the image)."""

    async def specs(self, ctx: SolveContext) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "echo", "description": "echo",
                                                  "parameters": {"type": "object", "properties": {}}}}]

    async def call(self, name: str, arguments: dict[str, Any], ctx: SolveContext) -> ToolOutcome:
        return ToolOutcome("echo")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, base = start_reference_server()
    try:
        yield base
    finally:
        proc.stop()


@pytest.mark.parametrize("protocol", ["chat_completions", "responses"])
def test_tool_calling_sends_the_seeds_images(url: str, protocol: str) -> None:
    image = f"data:image/png;base64,{draw(4, 'red')}"
    seed = SeedResult("How many shapes are in the image?\nA. 3\nB. 4\nC. 5\nD. 6", "B", images=[image])
    before = server_stats(url)["images"].get("high", 0)

    async def go() -> Any:
        client = ModelClient(url, model="ref", protocol=protocol)
        try:
            return await ToolCallingSolver(client, [_Echo()], image_detail="high").solve(seed, SolveContext("0:0"))
        finally:
            await client.close()

    res = asyncio.run(go())
    assert res.error is None and res.response == "Answer: B"
    assert server_stats(url)["images"]["high"] == before + 1
    user = next(s for s in res.steps if s["source"] == "user")
    assert user["extra"] == {"images": [load_image(image).ref]} and "base64" not in str(res.steps)
