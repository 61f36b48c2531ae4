"""Log-probability scoring through a served model's `/v1/completions` endpoint.

`loglikelihood(client, context, continuation)` asks the server to score `context +
continuation` as lm-eval's `local-completions` model does: `echo: true, logprobs: 1,
max_tokens: 1, temperature: 0`; the server answers with one log-probability per prompt token
(the first is null: nothing precedes it) and one generated token, which is ignored. nel has
no tokenizer of the served model, so the continuation's tokens are found by the echoed
`text_offset`s (see `_continuation_span`), not by tokenizing locally as lm-eval does.

`rolling_loglikelihood(client, text)` is the whole text's log-likelihood, for perplexity and
bits-per-byte. The requests go through the `ModelClient` given (retries, the interceptor chain,
auth), so the engine's journal and cache see them as any other request.

Servers: llama.cpp's server (llama-cpp-python's `llama_cpp.server` with `logits_all`, its
default), vLLM and SGLang answer echo + logprobs; chat endpoints and OpenAI's/NIM's hosted
chat models do not, and `check_logprobs` refuses them in one line before any item request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.errors import NelError
from nel_resources.model_client.errors import ModelError

if TYPE_CHECKING:
    from nel_resources.model_client.client import ModelClient

# The tiny request `check_logprobs` sends (a context and a continuation of a few tokens).
_PROBE = ("The capital of France", " is Paris")
# Rolling windows never get smaller than this many characters (a server refusing even
# these is not a context-length problem).
_MIN_WINDOW_CHARS = 256


@dataclass(frozen=True, slots=True)
class LoglikResult:
    """The log-likelihood of a continuation (or a whole text) under the served model.

    Attributes:
        logprob: Sum of the scored tokens' natural-log probabilities.
        is_greedy: Whether every scored token was the model's top choice (lm-eval's
            `is_greedy`: the continuation is what greedy decoding would produce).
        n_tokens: How many tokens were scored.
        n_bytes: UTF-8 bytes of the scored text (the continuation, or the whole text).
    """

    logprob: float
    is_greedy: bool
    n_tokens: int
    n_bytes: int


class NoLogprobsError(NelError):
    """The service cannot score prompts: no completions endpoint, no echo or no logprobs."""


class LogprobsResponseError(ModelError):
    """A 200 answer whose log-probabilities cannot be used for this request (per sample)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "logprobs", 200, 1)


def _body(client: ModelClient, prompt: str) -> bytes:
    """The scoring request: the prompt echoed with its tokens' logprobs, one token generated.

    Built here, not from the client's generation settings: sampling settings (a `stop`, a
    `max_completion_tokens`) must not change what is scored. `max_tokens: 1`, not 0: llama.cpp's
    server reads 0 as "until the context is full".
    """
    body: dict[str, Any] = {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1,
                            "temperature": 0.0}
    if client.model:
        body = {"model": client.model, **body}
    return orjson.dumps(body)


def _logprobs_of(raw: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The echoed text and the `logprobs` block of the first choice, or why there are none."""
    choices = (raw or {}).get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise LogprobsResponseError("the server's answer has no choices")
    block = choices[0].get("logprobs")
    if not isinstance(block, dict) or not isinstance(block.get("token_logprobs"), list) \
            or not isinstance(block.get("text_offset"), list):
        raise LogprobsResponseError("the server's answer has no echoed prompt logprobs "
                                    "(choices[0].logprobs.token_logprobs/text_offset)")
    return str(choices[0].get("text") or ""), block


def _continuation_span(text: str, block: dict[str, Any], context_chars: int,
                       prompt_chars: int) -> tuple[int, int]:
    """Token indices [start, end) of the continuation among the echoed tokens.

    Offsets are mapped from the server's coordinates to the echoed text's by aligning the
    ends: llama.cpp's offsets count a SentencePiece leading space that the echoed text lacks,
    vLLM's do not; either way the difference lies at the very start. A token straddling the
    context's end belongs to the continuation (its probability depends on the continuation);
    tokens starting at or past the prompt's end were generated and are not scored.
    """
    offsets: list[int] = block["text_offset"]
    tokens = block.get("tokens") or []
    n = len(offsets)
    if n == 0:
        raise LogprobsResponseError("the server echoed no prompt tokens")
    last_len = len(tokens[-1]) if len(tokens) == n and isinstance(tokens[-1], str) else 0
    shift = offsets[-1] + last_len - len(text)
    boundary, prompt_end = context_chars + shift, prompt_chars + shift
    ends = [*offsets[1:], offsets[-1] + last_len]
    start = next((i for i in range(n) if offsets[i] >= boundary or ends[i] > boundary), n)
    end = next((i for i in range(start, n) if offsets[i] >= prompt_end), n)
    return start, end


def _score(block: dict[str, Any], start: int, end: int, n_bytes: int) -> LoglikResult:
    """Sum and greediness over the echoed tokens [start, end)."""
    if end <= start:
        raise LogprobsResponseError("the server echoed no token of the continuation")
    lps = block["token_logprobs"]
    tops = block.get("top_logprobs") or []
    total, greedy = 0.0, True
    for i in range(start, end):
        lp = lps[i]
        if not isinstance(lp, int | float):
            # The first prompt token has no logprob (nothing precedes it): an empty context.
            raise LogprobsResponseError(f"token {i} of the prompt has no logprob "
                                        "(the context must not be empty)")
        total += float(lp)
        top = tops[i] if i < len(tops) else None
        if greedy and isinstance(top, dict) and top and lp < max(top.values()):
            greedy = False
    return LoglikResult(total, greedy, end - start, n_bytes)


def echoed_logprobs(raw: dict[str, Any] | None, prompt: str) -> tuple[str, dict[str, Any]]:
    """The echoed text and `logprobs` block of a scoring answer for `prompt`.

    Raises:
        LogprobsResponseError: no logprobs, or a server that ignored `echo` (its text does
            not start with the prompt; its logprobs would be the generated token's only).
    """
    text, block = _logprobs_of(raw)
    # SentencePiece servers may add or drop a leading space: compare without it.
    if not text.lstrip().startswith(prompt.lstrip()[:200]):
        raise LogprobsResponseError("the server did not echo the prompt (no `echo` support)")
    return text, block


async def _echo(client: ModelClient, prompt: str) -> tuple[str, dict[str, Any]]:
    """One scoring request through the client; the echoed text and its logprobs block."""
    resp = await client.generate(prompt=prompt, body=_body(client, prompt))
    return echoed_logprobs(resp.raw, prompt)


async def loglikelihood(client: ModelClient, context: str, continuation: str) -> LoglikResult:
    """The log-probability of `continuation` following `context` (lm-eval's `loglikelihood`).

    Args:
        client: A client speaking the `completions` protocol (see `check_logprobs`).
        context: The text conditioned on; must not be empty.
        continuation: The text scored (e.g. `" B"` or `" Paris"`, leading space included).

    Raises:
        ModelError: the request failed for good, or its answer carries no usable logprobs.
    """
    if not context:
        raise NelError("loglikelihood: the context must not be empty (the first token of a "
                       "prompt has no log-probability)")
    prompt = context + continuation
    text, block = await _echo(client, prompt)
    start, end = _continuation_span(text, block, len(context), len(prompt))
    return _score(block, start, end, len(continuation.encode()))


def _windows(text: str, size: int) -> list[tuple[int, int]]:
    """`text` cut into spans of at most `size` characters, each cut before a whitespace
    (so no word is split between two windows) where there is one."""
    spans, a = [], 0
    while a < len(text):
        b = min(a + size, len(text))
        if b < len(text):
            cut = max(text.rfind(" ", a + 1, b), text.rfind("\n", a + 1, b))
            b = cut if cut > a else b
        spans.append((a, b))
        a = b
    return spans


async def rolling_loglikelihood(client: ModelClient, text: str, *, prefix: str = "",
                                prefix_token: bool = False,
                                window_chars: int | None = None) -> LoglikResult:
    """The log-likelihood of the whole `text` (lm-eval's `loglikelihood_rolling`).

    The text is scored in one request when it fits the model's context. When it does not
    (the server answers 4xx, or `window_chars` is given), it is cut into windows of at most
    `window_chars` characters at whitespace (halved from the whole text until the server
    accepts them, never below 256); each window is scored as the continuation of the
    `window_chars` characters before it, so every token keeps up to a window of context and
    each is scored exactly once.

    The text's first token has no context, and servers give it no log-probability (OpenAI's
    echo convention): it is not scored, unless `prefix` is given (e.g. `"\\n"`), after which
    the whole text is scored. lm-eval scores it after its tokenizer's prefix token (BOS, else
    EOT), sent as that token's text (`"<s>"`): `prefix="<s> ", prefix_token=True` sends what
    lm-eval sends with a llama tokenizer and scores the same tokens.

    Args:
        client: A client speaking the `completions` protocol.
        text: The document.
        prefix: Text the document is scored after (not itself scored).
        prefix_token: `prefix` is a special token's text, which the server reads as that
            token and does not echo: score the first window from the second echoed token on,
            as lm-eval's `[ctxlen:-1]` does with its one-token context (the echoed offsets
            of a leading space are unreliable there), and send later windows without it
            (lm-eval's later windows are text only).
        window_chars: Window size in characters; None = the whole text, then halve on 4xx.

    Returns:
        The summed result; `n_bytes` is the whole text's UTF-8 length.
    """
    if not text:
        raise NelError("rolling_loglikelihood: the text is empty")
    size = window_chars or len(text)
    while True:
        try:
            return await _rolling(client, text, prefix, size, prefix_token)
        except ModelError as exc:
            too_long = exc.status is not None and 400 <= exc.status < 500 and exc.status not in (
                401, 403, 429)
            if window_chars is not None or not too_long or size <= _MIN_WINDOW_CHARS:
                raise
            size = max(_MIN_WINDOW_CHARS, size // 2)


async def _rolling(client: ModelClient, text: str, prefix: str, size: int,
                   prefix_token: bool) -> LoglikResult:
    total, greedy, n_tokens = 0.0, True, 0
    for a, b in _windows(text, size):
        piece = text[a:b]
        if a:
            before = "" if prefix_token else prefix
            part = await loglikelihood(client, before + text[max(0, a - size):a], piece)
        else:
            part = await _first_window(client, prefix, piece, prefix_token)
            if part is None:
                continue  # a one-token text without prefix: nothing to score
        total += part.logprob
        greedy = greedy and part.is_greedy
        n_tokens += part.n_tokens
    if not math.isfinite(total):
        raise LogprobsResponseError("the server returned a non-finite log-probability")
    return LoglikResult(total, greedy, n_tokens, len(text.encode()))


async def _first_window(client: ModelClient, prefix: str, piece: str,
                        prefix_token: bool) -> LoglikResult | None:
    """The first window, scored after `prefix` (or after nothing).

    The first echoed token never has a log-probability (nothing precedes it in the echo).
    Without a prefix it is the window's seed and is not scored. A special-token prefix
    (`prefix_token`) leaves no echoed token of its own (the server drops BOS), so lm-eval
    scores the server's tokens from the second on.
    """
    echoed, block = await _echo(client, prefix + piece)
    start, end = _continuation_span(echoed, block, len(prefix), len(prefix) + len(piece))
    if prefix_token:
        start = 1
    lps = block["token_logprobs"]
    while start < end and not isinstance(lps[start], int | float):
        start += 1
    if start >= end:
        if prefix:
            raise LogprobsResponseError("the server echoed no scorable token of the text")
        return None
    return _score(block, start, end, 0)


async def check_logprobs(client: ModelClient, service: str = "the service") -> None:
    """Refuse, in one line and before any item request, a service that cannot score prompts.

    A chat-protocol client is refused without a request (chat endpoints return logprobs of
    generated tokens only, never of the prompt). A completions client gets one tiny scoring
    request; an answer without echoed prompt logprobs, or a 4xx, is refused.

    Raises:
        NoLogprobsError: with what to change.
    """
    servers = "llama.cpp's server, vLLM or SGLang"
    if client.protocol != "completions":
        raise NoLogprobsError(
            f"{service} speaks {client.protocol}: log-probability scoring needs a completions "
            f"endpoint (/v1/completions with echo and logprobs, e.g. {servers}); "
            "set the service's protocol to completions")
    try:
        await loglikelihood(client, *_PROBE)
    except LogprobsResponseError as exc:
        raise NoLogprobsError(
            f"{service} returns no prompt log-probabilities ({exc}): log-probability scoring "
            f"needs echo + logprobs on /v1/completions, e.g. {servers}") from None
    except ModelError as exc:
        if exc.status is None or not 400 <= exc.status < 500 or exc.status == 429:
            raise
        first = str(exc).splitlines()[0][:200] if str(exc) else f"HTTP {exc.status}"
        raise NoLogprobsError(
            f"{service} refused a log-probability request ({first}): log-probability scoring "
            f"needs echo + logprobs on /v1/completions, e.g. {servers}") from None
