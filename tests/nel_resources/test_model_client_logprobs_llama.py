"""Log-probability scoring against the real llama.cpp server (stories260K): the values nel
computes equal the ones read off direct echo+logprobs calls, lm-eval's way (the continuation's
tokens are the full prompt's tokens past the context's own token count)."""

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
from tests.support import http_json

pytestmark = pytest.mark.llama

STORY = ("Once upon a time, there was a little girl named Lily. She liked to play outside "
         "with her dog. One day, they went to the park and saw a big tree.")


def _run(base: str, fn: Callable[[ModelClient], Any], protocol: str = "completions") -> Any:
    async def go() -> Any:
        async with ModelClient(base, "stories260K", protocol=protocol) as client:
            return await fn(client)
    return asyncio.run(go())


def _echo(base: str, prompt: str) -> dict[str, Any]:
    status, _, data = http_json("POST", f"{base}/completions", {
        "model": "stories260K", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1,
        "temperature": 0}, timeout=120)
    assert status == 200, data
    return data["choices"][0]["logprobs"]


@pytest.mark.parametrize(("context", "continuation"), [
    ("Once upon a time, there was a little", " girl"),
    ("Lily and her mom went to the", " park to play with the ball."),
    ("Question: who liked the dog?\nAnswer:", " Lily"),
])
def test_loglikelihood_equals_direct_echo_sum(llama_server: str, context: str,
                                              continuation: str) -> None:
    got = _run(llama_server, lambda c: loglikelihood(c, context, continuation))
    # Within 1e-4: llama.cpp's logits differ by ~1e-6 between requests (its prompt cache
    # reuses a prefix evaluated in another batch).
    n_ctx = len(_echo(llama_server, context)["tokens"]) - 1  # minus the generated token
    full = _echo(llama_server, context + continuation)
    lps = full["token_logprobs"][n_ctx:-1]
    assert got.n_tokens == len(lps) > 0
    assert got.logprob == pytest.approx(sum(lps), abs=1e-4)
    tops = full["top_logprobs"][n_ctx:-1]
    assert got.is_greedy == all(lp >= max(t.values()) for lp, t in zip(lps, tops, strict=True))
    assert got.n_bytes == len(continuation.encode())


def test_greedy_continuation_is_greedy(llama_server: str) -> None:
    # What the model itself writes after the context is, by definition, greedy.
    status, _, data = http_json("POST", f"{llama_server}/completions", {
        "model": "stories260K", "prompt": STORY, "max_tokens": 4, "temperature": 0},
        timeout=120)
    assert status == 200, data
    written = data["choices"][0]["text"]
    got = _run(llama_server, lambda c: loglikelihood(c, STORY, written))
    assert got.is_greedy and got.logprob < 0


def test_rolling_whole_text_and_windows(llama_server: str) -> None:
    direct = _echo(llama_server, STORY)["token_logprobs"][1:-1]  # first: no context
    whole = _run(llama_server, lambda c: rolling_loglikelihood(c, STORY))
    assert whole.n_tokens == len(direct)
    assert whole.logprob == pytest.approx(sum(direct), abs=1e-4)
    assert whole.n_bytes == len(STORY.encode())
    # Longer than the 512-token context: refused whole (HTTP 400), then scored in windows.
    long_text = " ".join([STORY] * 25)
    rolled = _run(llama_server, lambda c: rolling_loglikelihood(c, long_text))
    assert rolled.n_bytes == len(long_text.encode())
    assert rolled.n_tokens > 25 * len(direct)
    assert rolled.logprob < 0


@pytest.mark.parametrize("text", [STORY, " " + STORY])
def test_rolling_after_bos_text_scores_what_lm_eval_scores(llama_server: str, text: str) -> None:
    # lm-eval (llama tokenizer, text requests) sends "<s> " + text and sums the echoed
    # log-probabilities from the second token on; a leading space is a scored token of its own.
    direct = _echo(llama_server, "<s> " + text)["token_logprobs"][1:-1]
    got = _run(llama_server, lambda c: rolling_loglikelihood(c, text, prefix="<s> ",
                                                             prefix_token=True))
    assert got.n_tokens == len(direct)
    assert got.logprob == pytest.approx(sum(direct), abs=1e-4)
    assert got.n_bytes == len(text.encode())


def test_chat_protocol_refused_in_one_line(llama_server: str) -> None:
    with pytest.raises(NoLogprobsError) as info:
        _run(llama_server, lambda c: check_logprobs(c, "service 'llama'"),
             protocol="chat_completions")
    assert "\n" not in str(info.value) and "completions" in str(info.value)
    _run(llama_server, check_logprobs)  # the completions endpoint passes
