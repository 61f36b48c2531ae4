"""The web search providers an agent solver may be given (`web_search_provider`), and where
their key and base URL come from: the environment, by name (NeMo Evaluator 0.3.0 reads
`TAVILY_API_KEY`; `TAVILY_BASE_URL` is OpenClaw's own override of Tavily's address)."""

from __future__ import annotations

__all__ = ["BASE_URL_ENV", "DEFAULT_BASE_URL", "KEY_ENV"]

#: provider -> the environment variable holding its key
KEY_ENV: dict[str, str] = {"tavily": "TAVILY_API_KEY"}
#: provider -> the environment variable naming another base URL (a compatible server)
BASE_URL_ENV: dict[str, str] = {"tavily": "TAVILY_BASE_URL"}
#: provider -> its own base URL
DEFAULT_BASE_URL: dict[str, str] = {"tavily": "https://api.tavily.com"}
