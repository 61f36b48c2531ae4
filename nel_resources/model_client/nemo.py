"""NeMo Evaluator 0.3.0's `ModelClient` constructor over nel's client."""

from __future__ import annotations

import os
from typing import Any

from benchmarks.errors import NelError
from nel_resources.model_client.client import ModelClient


class NemoModelClient(ModelClient):
    """`ModelClient` with NeMo Evaluator 0.3.0's constructor: its parameter order and defaults.

    What `from nemo_evaluator.engine import ModelClient` gives a user's code. The defaults
    are the ones its API reference documents (its endpoint and model, at most 8 requests in
    flight); `api_key=None` reads `NEMO_API_KEY`, as documented. Everything else (retries,
    redaction, the transport) is nel's ModelClient.
    """

    def __init__(
        self,
        base_url: str = "https://inference-api.nvidia.com/v1",
        model: str = "azure/openai/gpt-5.2",
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        timeout: float = 120.0,
        max_concurrent: int = 8,
        **nel_options: Any,
    ) -> None:
        for key in ("cache_dir", "retry", "reasoning_pattern"):
            if nel_options.get(key) is not None:
                raise NelError(f"ModelClient: {key}= (response caching, retry configs and "
                               "reasoning patterns of NeMo Evaluator) is not supported yet in nel")
            nel_options.pop(key, None)
        super().__init__(
            base_url, model, api_key=api_key if api_key is not None else os.environ.get("NEMO_API_KEY"),
            temperature=temperature, max_tokens=max_tokens, top_p=top_p, seed=seed, stop=stop,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            timeout=timeout, max_concurrent=max_concurrent, **nel_options,
        )
