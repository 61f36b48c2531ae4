"""Log-probability scoring (`model_client/logprobs.py`) against the reference server, whose
prompt log-probabilities are a known function (`reference_server/logprobs.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from nel_resources.model_client import ModelClient
from nel_resources.model_client.logprobs import (
    NoLogprobsError,
    check_logprobs,
    loglikelihood,
    rolling_loglikelihood,
)
from nel_resources.reference_server.logprobs import ALT_LOGPROB, token_logprob, tokens_of
from tests.support import server_stats


def _run(base: str, fn: Callable[[ModelClient], Any], protocol: str = "completions") -> Any:
    async def go() -> Any:
        async with ModelClient(base, "ref", protocol=protocol, max_retries=0) as client:
            return await fn(client)
    return asyncio.run(go())


def _expected(tokens: list[str], first: int) -> tuple[float, bool]:
    """The reference model's sum over tokens[first:] and whether each was greedy."""
    lps = [token_logprob(tokens[i - 1], tokens[i]) for i in range(first, len(tokens))]
    return sum(lps), all(lp >= ALT_LOGPROB for lp in lps)


@pytest.fixture(scope="module")
def ref() -> Any:
    from nel_resources.reference_server import start_reference_server

    proc, base = start_reference_server()
    try:
        yield base
    finally:
        proc.stop()


def test_loglikelihood_sums_the_continuation_tokens(ref: str) -> None:
    context, continuation = "Question: what is two plus two?\nAnswer:", " four, of course"
    got = _run(ref, lambda c: loglikelihood(c, context, continuation))
    tokens = [t for _, t in tokens_of(context + continuation)]
    n_ctx = len(tokens_of(context))
    want, greedy = _expected(tokens, n_ctx)
    assert got.logprob == pytest.approx(want)
    assert (got.n_tokens, got.n_bytes, got.is_greedy) == (3, len(continuation.encode()), greedy)


def test_token_straddling_the_context_end_belongs_to_the_continuation(ref: str) -> None:
    # "Answer: fo" + "ur" is one whitespace token " four" across the boundary.
    got = _run(ref, lambda c: loglikelihood(c, "Answer: fo", "ur"))
    assert got.n_tokens == 1
    assert got.logprob == pytest.approx(token_logprob("Answer:", " four"))


def test_rolling_windows_score_every_token_once(ref: str) -> None:
    text = " ".join(f"word{i}" for i in range(400))
    whole = _run(ref, lambda c: rolling_loglikelihood(c, text))
    tokens = [t for _, t in tokens_of(text)]
    assert whole.n_tokens == len(tokens) - 1  # the first token has no context
    assert whole.logprob == pytest.approx(_expected(tokens, 1)[0])
    # The reference model looks one token back, so windows give the same sum.
    windowed = _run(ref, lambda c: rolling_loglikelihood(c, text, window_chars=300))
    assert windowed.n_tokens == whole.n_tokens
    assert windowed.logprob == pytest.approx(whole.logprob)
    assert windowed.n_bytes == len(text.encode())


def test_chat_service_refused_before_any_request(ref: str) -> None:
    before = server_stats(ref)["total_requests"]
    with pytest.raises(NoLogprobsError, match=r"speaks chat_completions.*protocol to completions"):
        _run(ref, lambda c: check_logprobs(c, "service 'm'"), protocol="chat_completions")
    assert server_stats(ref)["total_requests"] == before


def test_server_without_prompt_logprobs_refused_in_one_line(
        reference_server: Callable[..., str]) -> None:
    base = reference_server(no_logprobs=True)
    with pytest.raises(NoLogprobsError) as info:
        _run(base, lambda c: check_logprobs(c, "service 'm'"))
    assert "returns no prompt log-probabilities" in str(info.value)
    assert "\n" not in str(info.value)
    assert server_stats(base)["total_requests"] == 1  # the one probe


def test_a_server_ignoring_echo_is_not_scored() -> None:
    # OpenAI's legacy answer without echo: logprobs of the generated token only, its offset
    # past the prompt. Taken for an echo, it would score the generated token.
    from nel_resources.model_client.logprobs import LogprobsResponseError, echoed_logprobs

    prompt = "Question: 2+2?\nAnswer: 4"
    raw = {"choices": [{"text": " The", "logprobs": {
        "tokens": [" The"], "text_offset": [len(prompt)], "token_logprobs": [-0.5],
        "top_logprobs": [{" The": -0.5}]}}]}
    with pytest.raises(LogprobsResponseError, match="did not echo the prompt"):
        echoed_logprobs(raw, prompt)
    raw["choices"][0]["text"] = prompt + " The"
    assert echoed_logprobs(raw, prompt)[0] == prompt + " The"
