"""Provenance of a served model: the weights file's sha256 (cached by path, size and mtime),
the chat template the server applies, the server's name and version, asked of real servers."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from importlib import metadata
from pathlib import Path

import pytest
from aiohttp import web

from nel_resources.config import ServiceConfig
from nel_resources.services import provenance as prov
from nel_resources.services.gguf_meta import gguf_string
from nel_resources.services.weights_hash import weights_sha256
from tests.support.realcomponents import llama_model_path, require_real_component

# shared/models/README.md: the model's sha256 and its embedded chat template
_SHA256 = "9651322d22993875b772bfb391628f93ce1c1b4a51dbf1297bb20e23e3a0421f"
_TEMPLATE = ("{% for message in messages %}{{ message['content'] }}{% if not loop.last %}\n"
             "{% endif %}{% endfor %}")


@pytest.fixture
def model_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = llama_model_path()
    if not src.is_file():
        require_real_component(f"model file {src} is missing")
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    prov._CACHE.clear()
    dst = tmp_path / "ckpt" / "step-100.gguf"
    dst.parent.mkdir()
    shutil.copy(src, dst)
    return dst


def test_gguf_chat_template_is_read_from_the_file_header(model_copy: Path) -> None:
    assert gguf_string(model_copy, "tokenizer.chat_template") == _TEMPLATE
    assert gguf_string(model_copy, "tokenizer.ggml.model") == "llama"
    assert gguf_string(model_copy, "no.such.key") is None
    assert gguf_string(model_copy.parent, "tokenizer.chat_template") is None  # not a file


def test_weights_hash_is_cached_by_path_size_and_mtime(model_copy: Path, tmp_path: Path) -> None:
    assert weights_sha256(model_copy) == _SHA256
    cache = tmp_path / "cache" / "weights-sha256.json"
    entries = json.loads(cache.read_text())
    (key,) = entries
    assert key.startswith(f"{model_copy.resolve()}|{model_copy.stat().st_size}|")
    # The cache is what answers next time (the file is not read again): plant a marker.
    cache.write_text(json.dumps({key: "cached-digest"}))
    assert weights_sha256(model_copy) == "cached-digest"
    # A file rewritten in place (new mtime) is hashed again.
    st = model_copy.stat()
    os.utime(model_copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert weights_sha256(model_copy) == _SHA256
    # A checkpoint directory: one digest over its files' names and digests.
    d = weights_sha256(model_copy.parent)
    assert d is not None and d != _SHA256 and len(d) == 64
    assert weights_sha256(tmp_path / "missing.gguf") is None


@pytest.mark.llama
def test_llama_cpp_server_provenance(llama_server: str, model_copy: Path) -> None:
    """The real llama.cpp (llama-cpp-python) server: reported id from /v1/models, weights and
    the template it applies (the GGUF's own: no --chat_format) from the file, server version."""
    svc = ServiceConfig(type="llama_cpp", url=llama_server, model="stories260K", model_path=str(model_copy))
    out = asyncio.run(prov.service_provenance(svc, llama_server, {}, "stories260K"))
    assert out["model"]["reported_id"] == "stories260K"
    assert out["model"]["weights_sha256"] == f"sha256:{_SHA256}"
    assert out["model"]["weights_file"] == "step-100.gguf"
    assert out["chat_template"] == {"sha256": prov.text_sha256(_TEMPLATE),
                                    "source": "GGUF metadata (tokenizer.chat_template)"}
    assert out["tokenizer"] == "embedded in the GGUF file (tokenizer.ggml.model=llama)"
    assert out["server"] == {"name": "llama-cpp-python", "version": metadata.version("llama_cpp_python")}
    # Another template given to the server: the file's is not claimed.
    other = svc.model_copy(update={"extra_args": ["--chat_format", "chatml"]})
    prov._CACHE.clear()
    out = asyncio.run(prov.service_provenance(other, llama_server, {}, "stories260K"))
    assert out["chat_template"]["sha256"] == prov.NOT_EXPOSED
    # An API endpoint nel did not start: only what the server reports.
    api = ServiceConfig(url=llama_server, model="stories260K")
    prov._CACHE.clear()
    out = asyncio.run(prov.service_provenance(api, llama_server, {}, "stories260K"))
    assert out["model"]["reported_id"] == "stories260K" and out["model"]["weights_sha256"] == prov.UNKNOWN
    assert out["chat_template"]["sha256"] == prov.NOT_EXPOSED
    assert out["server"]["name"] == "uvicorn"  # its `Server` header, the only name it gives


async def _props_server(template: str) -> tuple[web.AppRunner, str]:
    """llama.cpp's `llama-server` endpoints nel reads (/props, /v1/models), for the /props path."""
    async def props(_: web.Request) -> web.Response:
        return web.json_response({"chat_template": template, "build_info": "b5000-abc"})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "revision": "r1"}]})

    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"


def test_props_template_and_build_and_failures_never_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path))
    prov._CACHE.clear()

    async def go() -> tuple[dict, dict, dict, dict]:
        runner, url = await _props_server("{{ messages }}")
        try:
            served = await prov.service_provenance(ServiceConfig(url=url), url, {}, "m")
            sent = await prov.service_provenance(
                ServiceConfig(url=url, generation={"extra_body": {"chat_template": "T"}}), url + "/", {}, "m")
        finally:
            await runner.cleanup()
        prov._CACHE.clear()
        dead = await prov.service_provenance(ServiceConfig(url=url), url, {}, "m")  # nothing listens
        dead_sent = await prov.service_provenance(
            ServiceConfig(url=url, generation={"extra_body": {"chat_template": "T"}}), url, {}, "m")
        return served, sent, dead, dead_sent

    served, sent, dead, dead_sent = asyncio.run(go())
    assert served["chat_template"] == {"sha256": prov.text_sha256("{{ messages }}"), "source": "server /props"}
    assert served["server"] == {"name": "llama.cpp", "version": "b5000-abc"}
    assert served["model"]["revision"] == "r1" and served["model"]["reported_id"] == "m"
    # /props wins over a template nel sends; without /props the sent one is recorded
    assert sent["chat_template"]["source"] == "server /props"
    assert dead["model"]["reported_id"] == prov.UNKNOWN and dead["server"]["name"] == prov.UNKNOWN
    assert dead["chat_template"]["sha256"] == prov.NOT_EXPOSED
    assert dead_sent["chat_template"] == {"sha256": prov.text_sha256("T"), "source": "sent with each request"}
