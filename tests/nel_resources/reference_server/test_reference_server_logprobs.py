"""The reference server's deterministic prompt log-probabilities (`reference_server/logprobs.py`)."""

from __future__ import annotations

import pytest

from nel_resources.reference_server.logprobs import (
    ALT_LOGPROB,
    ALT_TOKEN,
    logprobs_block,
    requested_top_n,
    token_logprob,
)
from nel_resources.reference_server.replies import BadRequest


def test_echo_block_covers_prompt_and_generated_with_offsets_into_the_text() -> None:
    block = logprobs_block("Hello big world", " The", 1, echo=True)
    text = "Hello big world The"
    assert block["tokens"] == ["Hello", " big", " world", " The"]
    assert [text[o:o + len(t)] for o, t in zip(block["text_offset"], block["tokens"],
                                               strict=True)] == block["tokens"]
    assert block["token_logprobs"][0] is None and block["top_logprobs"][0] is None
    assert block["token_logprobs"][1] == token_logprob("Hello", " big")
    for lp, top in zip(block["token_logprobs"][1:], block["top_logprobs"][1:], strict=True):
        assert -10 < lp < 0
        # Greedy when above the alternative; else the alternative is listed above it.
        assert (max(top.values()) == lp) == (lp >= ALT_LOGPROB)
        assert (ALT_TOKEN in top) == (lp < ALT_LOGPROB)


def test_without_echo_only_the_generated_tokens_offset_from_the_prompt_start() -> None:
    block = logprobs_block("Hello world", " The", 1, echo=False)
    assert block["tokens"] == [" The"] and block["text_offset"] == [len("Hello world")]
    assert block["token_logprobs"] == [token_logprob(" world", " The")]


@pytest.mark.parametrize(("value", "want"), [(None, None), (False, None), (True, 1), (0, 0), (5, 5)])
def test_requested_top_n(value: object, want: int | None) -> None:
    assert requested_top_n({"logprobs": value}) == want


def test_bad_logprobs_value_is_a_400() -> None:
    with pytest.raises(BadRequest, match="'logprobs' must be an integer"):
        requested_top_n({"logprobs": "x"})
