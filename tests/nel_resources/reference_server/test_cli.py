"""The reference server's command line: `nel reference-server` serves what its flags say, and a
flag left out means `ServerConfig`'s default (the flags' defaults live apart from the
dataclass so that `nel --help` does not import it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import asdict
from pathlib import Path

from nel_resources.reference_server import ServerConfig
from nel_resources.reference_server.cli import add_server_arguments, build_parser
from tests.support.cli import started_nel
from tests.support.waiting import PROCESS_START_S, wait_while_running


def test_a_flag_left_out_means_the_server_config_default() -> None:
    args = vars(build_parser().parse_args([]))
    assert args == asdict(ServerConfig())


def test_nel_help_does_not_import_the_server() -> None:
    code = ("import sys; from dagster_project.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('nel_resources.reference_server')"
            " or m in ('dataclasses', 'orjson', 'asyncio')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == [
        "nel_resources.reference_server", "nel_resources.reference_server.cli",
        "nel_resources.reference_server.defaults"]
    assert add_server_arguments  # the function `nel reference-server` registers its flags with


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_nel_reference_server_serves_its_flags(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"match": "Capital of Peru?", "content": "Lima"}) + "\n")
    port_file = tmp_path / "port"
    with started_nel("reference-server", "--port", "0", "--port-file", str(port_file),
                     "--model-name", "tiny", "--answers", str(answers),
                     "--default-content", "#### 42", out_dir=tmp_path) as (proc, stdout, _):
        port = wait_while_running(lambda: port_file.exists() and port_file.read_text(), proc=proc,
                                  what="the port file", log=stdout, timeout=PROCESS_START_S)
        base = f"http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(base + "/models", timeout=30) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["tiny"]
        ask = lambda text: _post(base + "/chat/completions", {  # noqa: E731
            "messages": [{"role": "user", "content": text}]})["choices"][0]["message"]["content"]
        assert ask("Capital of Peru?") == "Lima"
        assert ask("What is 6 x 7?") == "#### 42"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_START_S) == 0
