"""lm-eval's token windows for a long document, through the served model's own tokenizer.

lm-eval's `loglikelihood_rolling` (API models, text requests) cuts a document's tokens into
windows of `max_length - 2` predicted tokens (`utils.get_rolling_token_windows`, context 1,
made disjoint), sends each window as its tokenizer's decoding of `context + predicted`
tokens (the first window: `[prefix token] + predicted`), and sums the server's echoed
log-probabilities from index `len(context)` to the last but one (`[ctxlen:-1]`). nel has no
local tokenizer: it asks the server's (llama-cpp-python's `/extras/tokenize` and
`/extras/detokenize`), whose tokens are lm-eval's for the same vocabulary, and decodes as a
llama (SentencePiece) Hugging Face tokenizer does: one leading space of the text dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from nel_resources.model_client.logprobs import (
    LoglikResult,
    LogprobsResponseError,
    NoLogprobsError,
    _echo,
)

if TYPE_CHECKING:
    from nel_resources.model_client.client import ModelClient


def lm_eval_windows(tokens: list[int], max_length: int) -> list[tuple[list[int], list[int]]]:
    """lm-eval's disjoint rolling windows: (context tokens, predicted tokens) pairs.

    `max_length` is lm-eval's `max_length` model argument: it keeps one token for generation
    and one for context, so each window predicts at most `max_length - 2` tokens. The first
    window's context is empty here (lm-eval's prefix token, sent as text by the caller).
    """
    seq = max_length - 2
    if seq < 1:
        raise ValueError(f"max_length must be at least 3 (got {max_length})")
    out: list[tuple[list[int], list[int]]] = []
    if not tokens:
        return out
    first = min(seq, len(tokens))
    out.append(([], tokens[:first]))
    done = first
    while done < len(tokens):
        n = min(len(tokens) - done, seq)  # context 1: a window predicts up to `seq` tokens
        end = done + n
        window = tokens[max(0, end - seq - 1):end - 1]
        out.append((window[:len(window) - (n - 1)], tokens[end - n:end]))
        done = end
    return out


def _root(client: ModelClient) -> str:
    parts = urlsplit(client.base_url)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


async def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One tokenizer request (not a model call: no retries, cache or interceptors)."""
    import aiohttp

    why = ""
    try:
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
            if resp.status == 200:
                return await resp.json()
            why = f"HTTP {resp.status}"
    except aiohttp.ClientError as exc:
        why = type(exc).__name__
    raise NoLogprobsError(
        f"{url}: {why}: lm-eval token windows (params.max_length) need the server's tokenizer "
        "(llama-cpp-python's /extras/tokenize and /extras/detokenize); drop max_length to "
        "score documents whole")


async def check_tokenizer(client: ModelClient) -> None:
    """Refuse, in one line and before any item request, a server without the tokenizer
    endpoints the token windows need."""
    await _tokens(client, "Once upon a time")


async def _tokens(client: ModelClient, text: str) -> list[int]:
    """The text's tokens without the BOS the server adds (lm-eval tokenizes without it)."""
    url = f"{_root(client)}/extras/tokenize"
    tokens = list((await _post(url, {"input": text}))["tokens"])
    bos = list((await _post(url, {"input": ""}))["tokens"])
    return tokens[len(bos):] if bos and tokens[:len(bos)] == bos else tokens


async def _decode(client: ModelClient, tokens: list[int]) -> str:
    text = str((await _post(f"{_root(client)}/extras/detokenize", {"tokens": tokens}))["text"])
    # A llama Hugging Face tokenizer's decoder strips one leading space (SentencePiece's).
    return text[1:] if text.startswith(" ") else text


async def lm_eval_rolling(client: ModelClient, text: str, *, prefix: str,
                          max_length: int) -> LoglikResult:
    """The document's log-likelihood as lm-eval computes it with `max_length` token windows.

    Args:
        client: A completions client of a llama-cpp-python server.
        text: The document.
        prefix: lm-eval's prefix token as text, sent before the first window (`"<s> "` for a
            llama tokenizer: `decode([bos] + tokens)`).
        max_length: lm-eval's `max_length` model argument.
    """
    total, greedy, n_tokens = 0.0, True, 0
    for i, (ctx, pred) in enumerate(lm_eval_windows(await _tokens(client, text), max_length)):
        decoded = await _decode(client, ctx + pred)
        prompt, ctxlen = (prefix + decoded, 1) if i == 0 else (decoded, len(ctx))
        _, block = await _echo(client, prompt)
        lps = block["token_logprobs"][ctxlen:-1]
        tops = (block.get("top_logprobs") or [])[ctxlen:-1]
        if not lps or not all(isinstance(lp, int | float) for lp in lps):
            raise LogprobsResponseError("the server echoed no scorable token of a window")
        total += sum(lps)
        n_tokens += len(lps)
        greedy = greedy and all(not isinstance(t, dict) or not t or lp >= max(t.values())
                                for lp, t in zip(lps, tops, strict=False))
    return LoglikResult(total, greedy, n_tokens, len(text.encode()))
