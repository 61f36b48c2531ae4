"""`solver.type: openclaw` inside a `docker` sandbox, as NeMo Evaluator 0.3.0 runs PinchBench:
`nel eval run` on a PinchBench checkout written by the test (its automated task), the real
OpenClaw CLI (`make peers`) mounted read-only into a container of the local base image, the
real Docker engine, a scripted model server behind nel's capture proxy.

The scripted model has OpenClaw's `exec` tool write the task's file and try to reach a
listener the test runs on the Docker bridge's gateway (what a networked container would
reach), then searches the web (`web_search_provider: tavily`, the playbook's), then answers.
The task's automated checks grade the sandbox's workspace as they grade a `tool_calling` run
(1.0); the connection fails (the container has no network: only the proxy's and the search
relay's Unix sockets), the listener sees nobody, the search reaches the Tavily stand-in
through nel's relay with nel's key, and no container is left behind.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.support.agents import openclaw_bin
from tests.support.cli import run_nel
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.pinchbench_checkout import write_checkout
from tests.support.tavily_standin import MARKER, start_tavily_standin

KEY = "tvly-nel-sandbox-secret-4410"

PROBE = ("python3 -c \"import socket; socket.create_connection(('{ip}', {port}), timeout=3)\" "
         "2>/dev/null && echo EGRESS-OPEN || echo EGRESS-BLOCKED")


def _gateway(host: str) -> str:
    out = subprocess.run(["docker", "network", "inspect", "bridge", "--format",
                          "{{(index .IPAM.Config 0).Gateway}}"], capture_output=True,
                         text=True, env={"DOCKER_HOST": host, "PATH": "/usr/bin:/bin"},
                         timeout=60)
    return out.stdout.strip() or "127.0.0.1"


def _leftovers(host: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "-q", "--filter",
                          "volume=/opt/nel-openclaw/uds"], capture_output=True, text=True,
                         env={"DOCKER_HOST": host, "PATH": "/usr/bin:/bin"}, timeout=60)
    return out.stdout.split()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    host = start_docker_engine()
    root = tmp_path_factory.mktemp("oc-sbx")
    listener = socket.socket()
    ip = _gateway(host)
    try:
        listener.bind((ip, 0))
    except OSError:  # no bridge on this engine: the host's loopback stands for it
        ip = "127.0.0.1"
        listener.bind((ip, 0))
    listener.listen()
    hits: list[Any] = []

    def accept() -> None:
        try:
            while True:
                hits.append(listener.accept())
        except OSError:  # closed at the end
            return
    threading.Thread(target=accept, daemon=True).start()
    script = [{"match": "Task auto:", "turns": [
        {"tool_calls": [{"name": "exec", "arguments": {
            "command": "printf hello > greeting.txt; "
                       + PROBE.format(ip=ip, port=listener.getsockname()[1])}}]},
        {"tool_calls": [{"name": "tool_call", "arguments": {
            "id": "web_search", "args": {"query": "greeting words"}}}]},
        {"content": "Wrote greeting.txt."}]}]
    search, search_url, search_log = start_tavily_standin(root)
    proc, url = start_reference_server(tool_script=script, match_conversation=True)
    try:
        cfg = {
            "services": {"model": {"type": "api", "url": f"{url}/chat/completions",
                                   "model": "ref", "max_retries": 0},
                         # the checkout's judged tasks need one; the automated task never calls it
                         "judge": {"type": "api", "url": f"{url}/chat/completions",
                                   "model": "judge-m", "role": "judge"}},
            "benchmarks": [{
                "name": "pinchbench", "max_problems": 1,
                "params": {"tasks_dir": str(write_checkout(root / "skill"))},
                "solver": {"type": "openclaw", "service": "model",
                           "openclaw_bin": str(openclaw_bin()), "thinking": "off",
                           "web_search_provider": "tavily"},
                "sandbox": {"type": "docker", "image": BASE_IMAGE, "concurrency": 1},
                "scoring": {"metrics": [{"type": "judge", "name": "pinchbench_rubric",
                                         "service": "judge"}]}}],
            "output": {"dir": str(root / "out")},
        }
        path = root / "nel.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        sockets_before = set(Path("/tmp").glob("nel-uds-*"))
        p = run_nel("eval", "run", str(path), "--json", "--no-progress",
                    env={"DOCKER_HOST": host, "TAVILY_API_KEY": KEY,
                         "TAVILY_BASE_URL": search_url}, timeout=600)
        yield {"proc": p, "out": root / "out", "hits": hits, "host": host, "log": search_log,
               "sockets": set(Path("/tmp").glob("nel-uds-*")) - sockets_before}
    finally:
        listener.close()
        proc.stop()
        search.stop()  # type: ignore[attr-defined]


def _trajectory(out: Path) -> dict[str, Any]:
    (line,) = (out / "pinchbench" / "trajectories.jsonl").read_text().splitlines()
    return json.loads(line)


def test_the_agent_works_in_the_sandbox_and_is_graded_there(run: dict[str, Any]) -> None:
    assert run["proc"].returncode == 0, run["proc"].stderr[-3000:]
    t = _trajectory(run["out"])
    assert t["reward"] == 1.0, t
    # the same checks, with the same outcome, as the tool_calling run of this task
    # (test_pinchbench_e2e): they read the file the agent wrote in the sandbox
    assert t["scoring_details"]["breakdown"] == {"file_exists": 1.0, "content": 1.0,
                                                 "said_so": 1.0}
    steps = t["trajectory"][0]["steps"]
    calls = [c for s in steps for c in s.get("tool_calls") or []]
    assert [c["function_name"] for c in calls] == ["exec", "tool_call"]


def test_the_sandbox_reaches_only_the_proxy(run: dict[str, Any]) -> None:
    steps = _trajectory(run["out"])["trajectory"][0]["steps"]
    (result,) = [s for s in steps if (s.get("extra") or {}).get("function_name") == "exec"]
    assert result["message"].strip() == "EGRESS-BLOCKED"
    assert run["hits"] == []
    assert _leftovers(run["host"]) == []  # no container
    assert run["sockets"] == set()  # the relay's socket directory is gone too


def test_the_agents_search_goes_through_nels_relay(run: dict[str, Any]) -> None:
    requests = [json.loads(line) for line in run["log"].read_text().splitlines()]
    assert [(r["path"], r["body"]["query"]) for r in requests] == [("/search", "greeting words")]
    assert requests[0]["authorization"] == f"Bearer {KEY}"  # added on the host, by nel
    t = _trajectory(run["out"])
    assert [(s["query"], s["status"]) for s in t["scoring_details"]["web_searches"]] == [
        ("greeting words", 200)]
    assert MARKER in json.dumps(t["trajectory"])  # the result reached the model
    assert KEY not in json.dumps(t)
