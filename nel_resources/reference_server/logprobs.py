"""Deterministic prompt log-probabilities for the reference server's `/v1/completions`.

With `echo` and `logprobs` a real server returns, per token of the prompt and of the
generated text, its log-probability, its text offset in the echoed text and the top
alternatives (OpenAI's legacy completions format; the first token's values are null). The
reference server does the same over whitespace tokens (each token keeps the spaces before
it), with log-probabilities derived from a hash of the token and the one before it, so unit
tests can compute every expected value. `--no-logprobs` answers `logprobs: null`, as a server
without echo/logprobs support does.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from nel_resources.reference_server.replies import BadRequest

# A token: the whitespace before a word and the word (a trailing run of spaces is one too).
_TOKEN_RE = re.compile(r"\s*\S+|\s+$")
# The alternative shown in `top_logprobs` when the token is not the "greedy" one.
ALT_TOKEN = " the"
ALT_LOGPROB = -2.0


def tokens_of(text: str) -> list[tuple[int, str]]:
    """`text` as (offset, token) pairs; joined, the tokens are `text` again."""
    return [(m.start(), m.group()) for m in _TOKEN_RE.finditer(text)]


def token_logprob(prev: str, token: str) -> float:
    """The reference model's log-probability of `token` after `prev`: in (-10, -0.01]."""
    digest = hashlib.sha256(f"{prev}\x00{token}".encode()).digest()
    return -(int.from_bytes(digest[:4], "big") % 1000) / 100.0 - 0.01


def logprobs_block(prompt: str, generated: str, top_n: int, echo: bool) -> dict[str, Any]:
    """The `logprobs` block of a completion choice: over `prompt + generated` when `echo`,
    else over `generated` only (offsets still count from the prompt's start, as OpenAI's do).

    The prompt and the generated text are tokenised apart (a real server never merges a
    prompt token with a generated one). A token is the greedy choice when its
    log-probability is above `ALT_LOGPROB`; otherwise `ALT_TOKEN` is listed above it in
    `top_logprobs` (the top `top_n` and the token itself, as llama.cpp and vLLM list them).
    """
    pieces = tokens_of(prompt) + [(len(prompt) + o, t) for o, t in tokens_of(generated)]
    offsets: list[int] = []
    tokens: list[str] = []
    lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    prev = ""
    for i, (offset, token) in enumerate(pieces):
        if i == 0:  # nothing precedes the first token: null, as OpenAI's echo has it
            lp: float | None = None
            top: dict[str, float] | None = None
        else:
            lp = token_logprob(prev, token)
            top = {token: lp}
            if lp < ALT_LOGPROB and top_n >= 1 and token != ALT_TOKEN:
                top = {ALT_TOKEN: ALT_LOGPROB, token: lp}
        prev = token
        if not echo and offset < len(prompt):
            continue
        offsets.append(offset)
        tokens.append(token)
        lps.append(lp)
        tops.append(top)
    return {"tokens": tokens, "text_offset": offsets, "token_logprobs": lps,
            "top_logprobs": tops}


def requested_top_n(req: dict[str, Any]) -> int | None:
    """The `logprobs` count a completions request asks for, or None (not asked)."""
    value = req.get("logprobs")
    if value is None or value is False:
        return None
    if value is True:
        return 1
    if isinstance(value, int) and 0 <= value <= 20:
        return value
    raise BadRequest("'logprobs' must be an integer between 0 and 20")
