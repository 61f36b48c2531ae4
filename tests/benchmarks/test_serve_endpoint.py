"""`nel serve --port 0 --endpoint-file PATH`: the server writes where it listens once it
answers /health (a stale file is replaced), and withdraws the file when it stops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import urllib.request
from pathlib import Path

import pytest

from benchmarks.serve_endpoint import advertised_host
from tests.benchmarks.test_serve import TOY_NAME
from tests.support.cli import start_nel
from tests.support.waiting import wait_for


def test_advertised_host_is_the_node_name_for_every_interface() -> None:
    assert advertised_host("0.0.0.0") == socket.gethostname() == advertised_host("::")
    assert advertised_host("127.0.0.1") == "127.0.0.1"


@pytest.mark.parametrize("workers", [1, 2])
def test_port_0_endpoint_file_written_when_healthy_and_removed_on_sigterm(tmp_path: Path, workers: int) -> None:
    endpoint = tmp_path / "run" / "endpoint.txt"
    endpoint.parent.mkdir()
    endpoint.write_text("127.0.0.1:9\n")  # an earlier server's
    proc = start_nel("serve", "-b", TOY_NAME, "--import", "tests.benchmarks.test_serve", "--port", "0",
                     "--workers", str(workers), "--endpoint-file", str(endpoint), log=tmp_path / "log")
    try:
        def written() -> str | None:
            text = endpoint.read_text().strip() if endpoint.exists() else ""
            return text if text and text != "127.0.0.1:9" else None

        ep = wait_for(written, timeout=120, what="endpoint.txt", interval=0.1)
        host, port = ep.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        owner = json.loads(endpoint.with_suffix(".json").read_text())
        assert owner["pid"] == proc.pid and owner["endpoint"] == ep and owner["job_id"] is None
        with urllib.request.urlopen(f"http://{ep}/health", timeout=30) as resp:
            assert json.loads(resp.read())["dataset_size"] > 0
        assert f"nel serve: up at {ep}" in (tmp_path / "log").read_text()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert not endpoint.exists() and not endpoint.with_suffix(".json").exists()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
