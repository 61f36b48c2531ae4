"""The `simple` solver: one request per problem, as `ChatSolver` / `CompletionSolver`.

`run_evaluation` drives these through nel's shard loop (`loop.run_shard`: retries,
adaptive concurrency, reasoning split, failure categories); `solve` is the same request
for one problem, for code that calls a solver directly.
"""

from __future__ import annotations

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from benchmarks.images import DETAILS
from nel_assets.engine.evaluation.image_parts import stored_messages
from nel_assets.engine.evaluation.loop import build_request
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_resources.model_client import ModelClient


class _SimpleSolver:
    protocols: tuple[str, ...] = ()

    def __init__(self, client: ModelClient, system_prompt: str | None = None,
                 image_detail: str = "auto") -> None:
        if not isinstance(client, ModelClient):
            raise NelError(f"{type(self).__name__} needs nel's ModelClient, not "
                           f"{type(client).__name__}")
        if client.protocol not in self.protocols:
            raise NelError(f"{type(self).__name__} needs a client speaking "
                           f"{' or '.join(self.protocols)}, not {client.protocol}")
        self.client = client
        self.system_prompt = system_prompt
        self.image_detail = image_detail  # `detail` of a seed's image parts

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """One request for `task`, built the way the evaluation loop builds it."""
        messages, prompt, _ = build_request(task, self.client.protocol, self.system_prompt,
                                            self.image_detail)
        resp = await self.client.generate(messages, prompt)
        # the trajectory names images by hash (`nel-image:<sha256>`), never carries their bytes
        sent = (stored_messages(messages) if messages is not None
                else [{"role": "user", "content": prompt}])
        return SolveResult(response=resp.content, model_response=resp,
                           trajectory=[*sent, {"role": "assistant", "content": resp.content}])

    async def close(self) -> None:
        """Close the client's connections."""
        await self.client.close()


class ChatSolver(_SimpleSolver):
    """One chat request per problem; `system_prompt` goes before the benchmark's own."""

    protocols = ("chat_completions", "responses")


class CompletionSolver(_SimpleSolver):
    """One completions request per problem (system prompt, then the prompt text)."""

    protocols = ("completions",)


class VLMSolver(ChatSolver):
    """NeMo Evaluator's vision-language solver: one chat request per problem, the seed's
    images sent as `image_url` parts with `image_detail` (auto, low or high) before the text.

    nel's `ChatSolver` already sends a seed's images; this is the same solver under NeMo
    Evaluator's name and signature (`VLMSolver(client, system_prompt=None, image_detail="auto")`).
    """

    def __init__(self, client: ModelClient, system_prompt: str | None = None,
                 image_detail: str = "auto") -> None:
        if image_detail not in DETAILS:
            raise NelError(f"VLMSolver: image_detail {image_detail!r}: write one of {', '.join(DETAILS)}")
        super().__init__(client, system_prompt, image_detail)
