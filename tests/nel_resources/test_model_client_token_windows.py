"""lm-eval's token windows (`model_client/token_windows.py`): the same windows as lm-eval's
own `get_rolling_token_windows` + `make_disjoint_window`, and a one-line refusal of a
server without the tokenizer endpoints. Agreement of the scores with lm-eval itself on the
real llama.cpp server: tests/benchmarks/test_lm_eval_agreement.py."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from nel_resources.model_client import ModelClient
from nel_resources.model_client.logprobs import NoLogprobsError
from nel_resources.model_client.token_windows import check_tokenizer, lm_eval_windows


@pytest.mark.parametrize("max_length", [3, 4, 10, 48])
def test_windows_are_lm_evals(max_length: int) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("lm_eval")
    from lm_eval import utils

    prefix = -1
    for n in range(1, 3 * max_length):
        tokens = list(range(n))
        theirs = [utils.make_disjoint_window(w) for w in utils.get_rolling_token_windows(
            tokens, prefix, max_length - 2, 1)]
        # lm-eval's first context is its prefix token; nel sends that token as text
        expected = [([] if ctx == [prefix] else ctx, pred) for ctx, pred in theirs]
        assert lm_eval_windows(tokens, max_length) == expected
        assert sum(len(p) for _, p in expected) == n  # every token predicted once


@pytest.fixture(scope="module")
def ref() -> Iterator[str]:
    from nel_resources.reference_server import start_reference_server

    proc, base = start_reference_server()
    try:
        yield base
    finally:
        proc.stop()


def test_server_without_tokenizer_refused_in_one_line(ref: str) -> None:
    async def go() -> None:
        async with ModelClient(ref, "ref", protocol="completions", max_retries=0) as client:
            await check_tokenizer(client)

    with pytest.raises(NoLogprobsError) as info:
        asyncio.run(go())
    msg = str(info.value)
    assert "\n" not in msg and "/extras/tokenize" in msg and "max_length" in msg
