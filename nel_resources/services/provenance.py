"""What exactly answered a run: the served model's weights or reported id, the chat template
the server applied, the tokenizer, the server's name and version.

Asked once per service per run (a few GETs of a few milliseconds: `/v1/models`, llama.cpp's
`/props`, vLLM's `/version`, the `Server` header) and cached in the process for a minute. A
question the server does not answer leaves its field `"unknown"` (or `"not exposed"` for a
chat template no endpoint reports); it never fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from nel_resources.config import ServiceConfig
from nel_resources.wire.openai_fields import normalize_base_url

UNKNOWN = "unknown"
NOT_EXPOSED = "not exposed"
_TTL_S = 60.0
_TIMEOUT_S = 3.0
_CACHE: dict[str, tuple[float, dict[str, Any]]] = {}
# Flags that make a llama.cpp server apply another template than the GGUF file's own.
_TEMPLATE_FLAGS = ("--chat_format", "--chat-template", "--chat-template-file", "--chat_handler")


def text_sha256(text: str) -> str:
    """The sha256 of a text (a chat template) as nel records it: `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


async def _get(session: Any, url: str) -> tuple[int, dict[str, str], Any]:
    """(status, lower-case headers, JSON body or None); (0, {}, None) when it failed."""
    import aiohttp

    try:
        async with session.get(url) as resp:
            headers = {k.lower(): v for k, v in resp.headers.items()}
            try:
                body = await resp.json(content_type=None)
            except (ValueError, aiohttp.ClientError):
                body = None
            return resp.status, headers, body
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return 0, {}, None


async def _get_all(urls: list[str], headers: dict[str, str]) -> list[tuple[int, dict[str, str], Any]]:
    """GET each URL at once: over nel's raw HTTP/1.1 client for `http://` (a plain-HTTP run
    never loads aiohttp: it costs ~0.3 s of import), over aiohttp for `https://`."""
    from urllib.parse import urlsplit

    first = urlsplit(urls[0])
    if first.scheme != "http" or not first.hostname:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_TIMEOUT_S),
                                         headers=headers) as session:
            return list(await asyncio.gather(*(_get(session, u) for u in urls)))
    from nel_resources.wire.http_raw import RawHTTPPool

    pool = RawHTTPPool(first.hostname, first.port or 80, limit=len(urls),
                       connect_timeout=_TIMEOUT_S, host_header=first.netloc)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()

    async def one(u: str) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(u)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                resp = await pool.request("GET", path, head)
        except (OSError, TimeoutError):  # RawHTTPError is a ConnectionError
            return 0, {}, None
        return resp.status, resp.headers, _json(resp.body)

    try:
        return list(await asyncio.gather(*(one(u) for u in urls)))
    finally:
        await pool.close()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _model_entry(body: Any, wanted: str | None) -> dict[str, Any]:
    data = body.get("data") if isinstance(body, dict) else None
    entries = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []
    for d in entries:
        if wanted is not None and d.get("id") == wanted:
            return d
    return entries[0] if entries else {}


def _local_weights(svc: ServiceConfig) -> Path | None:
    """The weights nel knows to be served: a launched service's (or checkpoint's) local file."""
    path = svc.model_path or (svc.model if svc.type != "api" else None)
    if not path or "://" in path:
        return None
    p = Path(path).expanduser()
    return p if p.exists() else None


def _template(svc: ServiceConfig, props: Any, weights: Path | None) -> dict[str, Any]:
    """The chat template's hash and where it was read."""
    if isinstance(props, dict) and isinstance(props.get("chat_template"), str) and props["chat_template"]:
        return {"sha256": text_sha256(props["chat_template"]), "source": "server /props"}
    sent = svc.generation.extra_body.get("chat_template")
    if isinstance(sent, str) and sent:
        return {"sha256": text_sha256(sent), "source": "sent with each request"}
    if (svc.type == "llama_cpp" and weights is not None and weights.is_file()
            and not any(a.split("=")[0] in _TEMPLATE_FLAGS for a in svc.extra_args)):
        from nel_resources.services.gguf_meta import gguf_string

        embedded = gguf_string(weights, "tokenizer.chat_template")
        if embedded:
            return {"sha256": text_sha256(embedded), "source": "GGUF metadata (tokenizer.chat_template)"}
    return {"sha256": NOT_EXPOSED, "source": NOT_EXPOSED}


def _tokenizer(svc: ServiceConfig, props: Any, weights: Path | None) -> str:
    args = list(svc.extra_args)
    for flag in ("--tokenizer", "--tokenizer-path"):
        if flag in args and args.index(flag) + 1 < len(args):
            return args[args.index(flag) + 1]
    if weights is not None and weights.is_file() and weights.suffix == ".gguf":
        from nel_resources.services.gguf_meta import gguf_string

        kind = gguf_string(weights, "tokenizer.ggml.model")
        if kind:
            return f"embedded in the GGUF file (tokenizer.ggml.model={kind})"
    if weights is not None and weights.is_dir() and (weights / "tokenizer.json").is_file():
        return f"{weights.name}/tokenizer.json"
    return UNKNOWN


def _server(svc: ServiceConfig, headers: dict[str, str], props: Any, version: Any) -> dict[str, str]:
    name, ver = UNKNOWN, UNKNOWN
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        ver = version["version"]  # vLLM's /version (it names no server: the type does)
        name = str(version.get("name") or ("vllm" if svc.type == "vllm" else name))
    if isinstance(props, dict) and isinstance(props.get("build_info"), str):
        name, ver = "llama.cpp", props["build_info"]  # llama-server's /props
    if svc.type == "llama_cpp" and not svc.command and name == UNKNOWN:
        name = "llama-cpp-python"  # nel starts `python -m llama_cpp.server` in its own venv
        with contextlib.suppress(metadata.PackageNotFoundError):
            ver = metadata.version("llama_cpp_python")
    if name == UNKNOWN and headers.get("server"):
        name = headers["server"]
    return {"name": name, "version": ver}


async def service_provenance(svc: ServiceConfig, base_url: str | None, headers: dict[str, str],
                             model_id: str | None,
                             models_reply: tuple[int, str | None, bytes] | None = None) -> dict[str, Any]:
    """The provenance of the model behind `base_url` (cached per service for a minute).

    `models_reply` is the run's preflight `GET /v1/models` answer (status, `Server` header,
    body), when the client made one: it is read instead of asking again.
    """
    url = normalize_base_url(base_url or svc.url or "")
    key = f"{url}|{model_id}|{svc.model_path}|{svc.type}|{sorted(svc.generation.extra_body)}"
    hit = _CACHE.get(key)
    if hit is not None and time.monotonic() - hit[0] < _TTL_S:
        return hit[1]
    root = url[: -len("/v1")] if url.endswith("/v1") else url
    get_headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if models_reply is not None:
        m_headers = {"server": models_reply[1]} if models_reply[1] else {}
        models = _json(models_reply[2]) if models_reply[0] == 200 else None
        (p_status, _, props), (v_status, _, version) = await _get_all(
            [root + "/props", root + "/version"], get_headers)
    else:
        (_, m_headers, models), (p_status, _, props), (v_status, _, version) = await _get_all(
            [url + "/models", root + "/props", root + "/version"], get_headers)
    props = props if p_status == 200 else None
    version = version if v_status == 200 else None
    entry = _model_entry(models, model_id)
    weights = _local_weights(svc)
    digest = await asyncio.to_thread(weights_digest, weights) if weights is not None else None
    out = {
        "model": {
            "reported_id": str(entry.get("id") or UNKNOWN),
            "root": str(entry.get("root") or UNKNOWN),
            "revision": str(entry.get("revision") or entry.get("model_sha") or UNKNOWN),
            "weights_sha256": digest or UNKNOWN,
            "weights_file": weights.name if weights is not None else UNKNOWN,
        },
        "chat_template": _template(svc, props, weights),
        "tokenizer": _tokenizer(svc, props, weights),
        "server": _server(svc, m_headers, props, version),
    }
    _CACHE[key] = (time.monotonic(), out)
    return out


def weights_digest(path: Path) -> str | None:
    """`sha256:<hex>` of the weights at `path` (cached by path, size and mtime)."""
    from nel_resources.services.weights_hash import weights_sha256

    d = weights_sha256(path)
    return None if d is None else "sha256:" + d
