"""Credentials inside an endpoint URL (`http://user:key@host/v1?api-key=...`).

Run through the real `nel eval run` against a real server process that records every
request head: the user-info arrives as HTTP Basic auth (never inside `Host`), the query
string arrives on every request, and no file nel writes holds the password or the key.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from nel_resources.runtime.processes import ManagedProcess
from nel_resources.wire.endpoint_url import redact_url, split_url, url_secrets
from tests.support.cli import run_nel
from tests.support.realcomponents import REPO_ROOT
from tests.support.waiting import wait_for

PASSWORD = "pw-Sup3rSecret/9"  # a '/' so it is percent-encoded in the URL
QUERY_KEY = "qk-AnotherSecret77"


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The recording server: (port, its JSONL log of request heads)."""
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    proc = ManagedProcess([sys.executable, "-m", "tests.support.recording_server",
                           "--port-file", str(port_file), "--log", str(log)],
                          name="recording-server", cwd=str(REPO_ROOT),
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()
    try:
        port = wait_for(lambda: int(port_file.read_text()) if port_file.exists() else None,
                        timeout=30, what="the recording server's port file", interval=0.05)
        proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout=30)
        yield port, log
    finally:
        proc.stop()


def _heads(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _header(head: dict, name: str) -> list[str]:
    return [v for k, v in head["headers"] if k.lower() == name.lower()]


@pytest.mark.parametrize("transport", ["raw", "aiohttp"])
def test_url_credentials_are_sent_as_meant_and_never_written(
        transport: str, recorder: tuple[int, Path], tmp_path: Path) -> None:
    port, log = recorder
    url = f"http://alice:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/v1?api-key={QUERY_KEY}"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: '{url}'\n    model: tiny\n"
                   f"    transport: {transport}\n"
                   "benchmarks:\n  - name: gsm8k\n    max_problems: 3\n")
    out = tmp_path / "out"
    proc = run_nel("eval", "run", str(cfg), "-o", str(out), "--no-progress",
                   env={"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", "")}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]

    heads = [h for h in _heads(log) if h["method"] == "POST"]
    assert len(heads) == 3, heads
    want_auth = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for head in heads:
        assert head["target"] == f"/v1/chat/completions?api-key={QUERY_KEY}", head
        assert _header(head, "Host") == [f"127.0.0.1:{port}"], head
        assert _header(head, "Authorization") == [want_auth], head

    written = [p for p in out.rglob("*") if p.is_file() and ".dagster" not in p.parts]
    assert any(p.name == "nel-config.yaml" for p in written)
    assert any(p.name.startswith("eval-") and p.suffix == ".json" for p in written), written
    secrets = [PASSWORD, quote(PASSWORD, safe=""), QUERY_KEY,
               base64.b64encode(f"alice:{PASSWORD}".encode()).decode()]
    for p in written:
        data = p.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s!r} written to {p}"
    assert "redacted" in (out / "nel-config.yaml").read_text()
    for s in secrets:
        assert s not in proc.stdout and s not in proc.stderr


def test_an_api_key_wins_over_the_user_info(recorder: tuple[int, Path], tmp_path: Path) -> None:
    port, log = recorder
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"services:\n  m:\n    type: api\n    url: 'http://u:p4ssw0rd@127.0.0.1:{port}/v1'\n"
                   "    model: tiny\n    api_key_env: NEL_TEST_URL_KEY\n"
                   "benchmarks:\n  - name: gsm8k\n    max_problems: 1\n")
    proc = run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "out"), "--no-progress",
                   env={"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", ""),
                        "NEL_TEST_URL_KEY": "sk-the-real-key"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (head,) = [h for h in _heads(log) if h["method"] == "POST"]
    assert _header(head, "Authorization") == ["Bearer sk-the-real-key"]
    assert _header(head, "Host") == [f"127.0.0.1:{port}"]


def test_split_and_redact() -> None:
    url = "https://bob:s3cr%2Ft@api.example.com:8443/v1?api-key=KEY123&x=1"
    ep = split_url(url)
    assert ep.base == "https://api.example.com:8443/v1"
    assert ep.query == "api-key=KEY123&x=1"
    assert ep.basic_auth == "Basic " + base64.b64encode(b"bob:s3cr/t").decode()
    red = redact_url(url)
    assert "s3cr" not in red and "KEY123" not in red and "api.example.com:8443/v1" in red
    assert {"s3cr/t", "s3cr%2Ft", "KEY123"} <= url_secrets(url)
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
