"""The requests of an `lm-eval://` benchmark: lm-eval's instances sent through nel's client.

`generate_until` documents get one generation request with the fields lm-eval's
`local-completions` / `local-chat-completions` models send (`until` as `stop`,
`max_gen_toks` as `max_tokens`, temperature 0 unless the task says), and the environment
verifies the answer with the task's filters and metrics. The log-likelihood kinds get one
scoring request per (context, continuation) pair, or the rolling log-likelihood of the
text, through `nel_resources.model_client.logprobs`, and the environment scores them; the
solver hands back that verdict (the reward is lm-eval's, not re-verified).
"""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks._types import SeedResult
from nel_assets.engine.evaluation.loop import build_request
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_resources.model_client import ModelClient, ModelError
from nel_resources.model_client.logprobs import (
    check_logprobs,
    loglikelihood,
    rolling_loglikelihood,
)
from nel_resources.model_client.token_windows import check_tokenizer, lm_eval_rolling

LOGLIK_KINDS = frozenset({"multiple_choice", "loglikelihood", "loglikelihood_rolling"})


class LmEvalSolver:
    """Sends an lm-eval document's requests and returns the answer (or lm-eval's verdict).

    Args:
        client: The run's model client.
        env: The `benchmarks.lm_eval.LmEvalEnvironment` whose documents are solved.
        system_prompt: The run's system prompt (put before the context, as for any seed).
        service: The service's name, for the one-line refusal of a service without logprobs.
    """

    def __init__(self, client: ModelClient, env: Any, system_prompt: str | None = None,
                 service: str = "the service") -> None:
        self.client = client
        self.env = env
        self.system_prompt = system_prompt
        self.service = service

    async def prepare(self) -> None:
        """Refuse, before any item request, log-likelihood tasks on a service that cannot
        score prompts (a chat endpoint, no echo/logprobs)."""
        kinds = {self.env.kind(i) for i in range(len(self.env))}
        if kinds & LOGLIK_KINDS:
            await check_logprobs(self.client, self.service)
        if "loglikelihood_rolling" in kinds and getattr(self.env, "max_length", None):
            await check_tokenizer(self.client)

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """One document: its generation, or its log-likelihoods scored by the task."""
        ctx = ctx or SolveContext("0:0")
        kind = str(task.metadata.get("lm_eval_kind"))
        try:
            if kind in LOGLIK_KINDS:
                return await self._scored(task, kind, ctx)
            return await self._generated(task, ctx)
        except ModelError as exc:
            return SolveResult("", error=str(exc)[:1000], failure_category=exc.category)

    async def _generated(self, task: SeedResult, ctx: SolveContext) -> SolveResult:
        messages, prompt, _ = build_request(task, self.client.protocol, self.system_prompt)
        fields = self.env.request_fields(task.metadata.get("gen_kwargs") or {})
        resp = await self.client.generate(messages, prompt, fields, repeat=ctx.repeat,
                                          session_id=ctx.sample_id)
        sent = messages if messages is not None else [{"role": "user", "content": prompt}]
        return SolveResult(response=resp.content, model_response=resp, turns=1,
                           trajectory=[*sent, {"role": "assistant", "content": resp.content}],
                           prompt_tokens=resp.prompt_tokens,
                           completion_tokens=resp.completion_tokens)

    async def _scored(self, task: SeedResult, kind: str, ctx: SolveContext) -> SolveResult:
        requests: list[list[str]] = task.metadata["requests"]
        if kind == "loglikelihood_rolling":
            # lm-eval scores the first token after its prefix token (`rolling_prefix`).
            prefix = str(getattr(self.env, "rolling_prefix", "") or "")
            max_length = getattr(self.env, "max_length", None)
            if max_length:  # lm-eval's token windows, by the server's tokenizer
                rolled = [await lm_eval_rolling(self.client, r[0], prefix=prefix,
                                                max_length=max_length) for r in requests]
            else:
                rolled = [await rolling_loglikelihood(self.client, r[0], prefix=prefix,
                                                      prefix_token=bool(prefix))
                          for r in requests]
            responses: list[Any] = [r.logprob for r in rolled]
            scored = [{"logprob": r.logprob, "n_tokens": r.n_tokens, "n_bytes": r.n_bytes}
                      for r in rolled]
        else:
            done = await asyncio.gather(*(loglikelihood(self.client, c, k) for c, k in requests))
            responses = [(r.logprob, r.is_greedy) for r in done]
            scored = [{"logprob": r.logprob, "is_greedy": r.is_greedy, "n_tokens": r.n_tokens}
                      for r in done]
        verdict = self.env.score(self.env.index_of(task.metadata), responses)
        details = {**verdict.scoring_details, "loglikelihoods": scored}
        return SolveResult(response=verdict.extracted_answer or "", reward=verdict.reward,
                           scoring_details=details, turns=len(requests))
