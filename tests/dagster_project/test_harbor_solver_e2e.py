"""The `harbor` solver end to end: `nel eval run` on Harbor-format tasks with the real Harbor
0.24.0 (its own Python 3.12 venv, `make peers`) running its terminus-2 agent in a real
`docker` sandbox (an image built here with tmux, which terminus-2 drives), the agent's model
calls through nel's capture proxy to the scripted reference server, which answers in
terminus-2's JSON format. The task's own tests then run in the same container.

The agent that does the task scores 1, the one that does it wrong 0; a task whose agent
outlasts its `[agent] timeout_sec` (`timeout_strategy: task`) is stopped without error and its
sandbox still verified; the trajectory is terminus-2's own ATIF file, queryable in the
store; a missing Harbor CLI and an agent Harbor does not have are one line, before any request.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.reference_server import start_reference_server
from tests.support import server_stats
from tests.support.cli import run_nel, summary_json
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.harbor_tasks import write_task_set as write_tasks
from tests.support.realcomponents import REPO_ROOT, require_real_component

IMAGE = "nel-test/harbor-tmux:1"
HARBOR = REPO_ROOT / ".venv-peers" / "harbor" / "bin" / "harbor"
TASKS: dict[str, dict[str, Any]] = {
    "a-greet": {"instruction": "Task greet: write the word hello into /app/greeting.txt.",
                "file": "greeting.txt", "expected": "hello\n"},
    "b-answer": {"instruction": "Task answer: write the number 42 into /app/answer.txt.",
                 "file": "answer.txt", "expected": "42\n"},
    "c-slow": {"instruction": "Task slow: write the word done into /app/done.txt.",
               "file": "done.txt", "expected": "done\n", "agent_timeout": 20.0},
}


def reply(analysis: str, *keystrokes: str, complete: bool = False, duration: float = 0.5) -> dict[str, str]:
    """One terminus-2 turn, as the model writes it (its JSON format)."""
    return {"content": json.dumps({
        "analysis": analysis, "plan": f"plan: {analysis}",
        "commands": [{"keystrokes": k, "duration": duration} for k in keystrokes],
        "task_complete": complete})}


SCRIPT: list[dict[str, Any]] = [
    {"match": "Task greet", "turns": [
        reply("writing the file", "echo hello > /app/greeting.txt\n"),
        reply("checking it", "cat /app/greeting.txt\n"),
        reply("the file holds hello", complete=True),
        reply("confirmed", complete=True)]},
    {"match": "Task answer", "turns": [
        reply("writing the answer", "echo 41 > /app/answer.txt\n"),
        reply("done", complete=True),
        reply("confirmed", complete=True)]},
    # does the work, then waits far past the task's agent timeout
    {"match": "Task slow", "turns": [
        reply("working", "echo done > /app/done.txt; sleep 600\n", duration=1.0),
        reply("still waiting", "", duration=30.0)], "repeat_last": True},
]


TOOL_SQL = """
SELECT json_extract_string(metadata, '$.task_id') AS task,
       CAST(json_extract(step, '$.step_id') AS INTEGER) AS step,
       json_extract_string(c, '$.arguments.keystrokes') AS keys
FROM results, unnest(CAST(steps AS JSON[])) AS s(step),
     unnest(CAST(json_extract(step, '$.tool_calls') AS JSON[])) AS t(c)
WHERE json_extract_string(c, '$.function_name') = 'bash_command'
ORDER BY task, step
"""


def build_image(docker_host: str) -> None:
    """The task image: the local Debian base with tmux (terminus-2's terminal), once."""
    env = {"DOCKER_HOST": docker_host, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    if subprocess.run(["docker", "image", "inspect", IMAGE], env=env,
                      capture_output=True).returncode == 0:
        return
    proc = subprocess.run(
        ["docker", "build", "--network", "host", "-q", "-t", IMAGE, "-"], env=env,
        input=(f"FROM {BASE_IMAGE}\nRUN apt-get update -q && apt-get install -y -q "
               "--no-install-recommends tmux && rm -rf /var/lib/apt/lists/*\n"),
        capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        require_real_component(f"could not build {IMAGE}: {proc.stderr[-2000:]}")


def write_task_set(root: Path) -> Path:
    return write_tasks(root, TASKS, IMAGE, agent_timeout=300.0)


@pytest.fixture(scope="module")
def docker_host() -> str:
    host = start_docker_engine()
    build_image(host)
    return host


@pytest.fixture(scope="module")
def harbor() -> Path:
    if not HARBOR.exists():
        require_real_component(f"Harbor is not installed at {HARBOR} (`make peers`)")
    return HARBOR


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, base = start_reference_server(tool_script=SCRIPT, match_conversation=True)
    try:
        yield base
    finally:
        proc.stop()


def config(url: str, tmp_path: Path, tasks: Path, harbor_bin: str = "harbor", **solver: Any) -> Path:
    cfg = {
        "services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                             "protocol": "chat_completions", "model": "ref", "max_concurrent": 4}},
        "sandboxes": {"box": {"type": "docker", "concurrency": 3}},
        "benchmarks": [{"name": "terminal-bench-v1", "sandbox": "box",
                        "params": {"tasks_dir": str(tasks)},
                        "solver": {"type": "harbor", "agent": "terminus-2", "service": "ref",
                                   "timeout_strategy": "task",
                                   "agent_kwargs": {"max_turns": 8},
                                   **{"harbor_bin": harbor_bin, **solver}}}],
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_terminus_2_does_the_tasks_in_the_docker_sandbox(tmp_path: Path, url: str,
                                                          docker_host: str, harbor: Path) -> None:
    tasks = write_task_set(tmp_path / "tasks")
    s = summary_json(run_nel("eval", "run", str(config(url, tmp_path, tasks, str(harbor))),
                             "--json", "--no-progress", env={"DOCKER_HOST": docker_host},
                             timeout=900))
    (res,) = s["results"]
    assert res["n_items"] == 3 and res["failed"] == 0, res
    rows = {json.loads(r["metadata"])["task_id"]: r for r in _store_rows(tmp_path / "out")}
    assert {k: r["reward"] for k, r in rows.items()} == {"a-greet": 1.0, "b-answer": 0.0,
                                                        "c-slow": 1.0}
    details = {k: json.loads(r["details"]) for k, r in rows.items()}
    assert details["a-greet"]["test_stdout"] == "PASS\n" and details["b-answer"]["test_stdout"] == "FAIL\n"
    assert details["c-slow"]["agent_timed_out"] is True and details["c-slow"]["agent_timeout_s"] == 20.0
    for k, d in details.items():
        assert d["agent"] == "terminus-2" and d["harbor_version"] == "0.24.0", (k, d)
        assert d["sandbox_commands"] > 0, (k, d)  # tmux ran in nel's sandbox
        assert d["model_calls"] >= 2 and d["model_calls_failed"] == 0, (k, d)
    # the trajectory is terminus-2's ATIF: the agent's turns with the commands it sent and
    # what the terminal showed
    traj = {t["seed_metadata"]["task_id"]: t for t in map(
        json.loads, (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines())}
    steps = traj["a-greet"]["trajectory"][0]["steps"]
    agent = [st for st in steps if st["source"] == "agent"]
    assert len(agent) == rows["a-greet"]["turns"] == 4
    calls = [(c["function_name"], c["arguments"]) for st in agent for c in st.get("tool_calls") or []]
    assert calls == [("bash_command", {"keystrokes": "echo hello > /app/greeting.txt\n", "duration": 0.5}),
                     ("bash_command", {"keystrokes": "cat /app/greeting.txt\n", "duration": 0.5}),
                     ("mark_task_complete", {}), ("mark_task_complete", {})], calls
    # what the terminal showed after `cat`: the file the agent wrote, in the sandbox's tmux
    seen = agent[1]["observation"]["results"][0]["content"]
    assert "cat /app/greeting.txt\nhello\n" in seen, seen
    assert all(st["metrics"]["prompt_tokens"] > 0 for st in agent)
    slow = traj["c-slow"]["trajectory"][0]["steps"]
    assert slow[-1]["source"] == "system" and slow[-1]["extra"] == {"agent_timed_out": True}
    assert traj["b-answer"]["reward"] == 0.0
    assert steps[0]["source"] == "user" and "Task greet" in steps[0]["message"]
    # which command the agent sent on which step, for every task, in DuckDB over the store
    q = run_nel("query", "-o", str(tmp_path / "out"), "-f", "json", TOOL_SQL)
    assert q.returncode == 0, q.stderr
    sent = [(r["task"], r["step"], r["keys"]) for r in json.loads(q.stdout)]
    assert sent[:3] == [("a-greet", 2, "echo hello > /app/greeting.txt\n"),
                        ("a-greet", 3, "cat /app/greeting.txt\n"),
                        ("b-answer", 2, "echo 41 > /app/answer.txt\n")], sent
    # every model call went through the proxy to the service under test
    assert server_stats(url)["total_requests"] >= 4 + 3


def test_terminus_2_against_the_real_llama_cpp_server(tmp_path: Path, docker_host: str,
                                                     harbor: Path) -> None:
    """The same path with a real model server that is not ours: llama.cpp serving the tiny
    stories260K model (a story teller: it never writes terminus-2's JSON). terminus-2 gets
    its replies through the proxy (which sets the service's max_tokens on them: without it
    the tiny model fills its context on every call), tells the model they do not parse, and
    stops at its `max_turns`; the sandbox is verified (0) and nothing is an error of the run."""
    from tests.support.realcomponents import llama_model_path, start_llama_server

    proc, llama = start_llama_server(llama_model_path(), n_ctx=8192)
    try:
        tasks = write_task_set(tmp_path / "tasks")
        for name in ("b-answer", "c-slow"):
            shutil.rmtree(tasks / name)
        cfg = yaml.safe_load(config(llama, tmp_path, tasks, str(harbor),
                                    agent_kwargs={"max_turns": 2}).read_text())
        cfg["services"] = {"tiny": {"type": "api", "url": f"{llama}/chat/completions",
                                    "protocol": "chat_completions", "model": "stories260K",
                                    "generation": {"max_tokens": 48, "temperature": 0.8,
                                                   "seed": 7}}}
        cfg["benchmarks"][0]["solver"]["service"] = "tiny"
        (tmp_path / "nel.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        s = summary_json(run_nel("eval", "run", str(tmp_path / "nel.yaml"), "--json",
                                 "--no-progress", env={"DOCKER_HOST": docker_host}, timeout=900))
    finally:
        proc.stop()
    (res,) = s["results"]
    assert res["n_items"] == 1 and res["failed"] == 0, res
    from nel_resources.storage.store import ResultStore

    (row,) = ResultStore(tmp_path / "out").read_shards("terminal-bench-v1", "tiny").to_pylist()
    assert row["error"] is None and row["reward"] == 0.0, row
    d = json.loads(row["details"])
    # the agent's calls reached llama.cpp through the proxy; the tiny model's replies never
    # parse, and terminus-2 stops at its max_turns
    assert d["model_calls"] > d["model_calls_failed"] >= 0, d
    assert d["agent"] == "terminus-2" and d["test_stdout"] == "FAIL\n", d
    steps = json.loads(row["steps"])
    assert 1 <= sum(st["source"] == "agent" for st in steps) <= 2, steps


def _store_rows(out: Path) -> list[dict[str, Any]]:
    from nel_resources.storage.store import ResultStore

    return ResultStore(out).read_shards("terminal-bench-v1", "ref").to_pylist()


@pytest.mark.parametrize(("solver", "key", "says"), [
    ({"harbor_bin": "/nonexistent/harbor"}, "benchmarks.0.solver.harbor_bin",
     "Harbor's CLI `/nonexistent/harbor` is not on PATH"),
], ids=["no-harbor"])
def test_what_cannot_run_is_one_line(tmp_path: Path, url: str, solver: dict[str, Any], key: str,
                                     says: str) -> None:
    tasks = write_task_set(tmp_path / "tasks")
    before = server_stats(url)["total_requests"]
    p = run_nel("eval", "run", str(config(url, tmp_path, tasks, **solver)), "--no-progress")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"key {key}: " in lines[0] and says in lines[0], lines[0]
    assert server_stats(url)["total_requests"] == before


def test_an_agent_harbor_does_not_have_is_one_line(tmp_path: Path, url: str, docker_host: str,
                                                   harbor: Path) -> None:
    tasks = write_task_set(tmp_path / "tasks")
    before = server_stats(url)["total_requests"]
    p = run_nel("eval", "run", str(config(url, tmp_path, tasks, str(harbor), agent="terminus-9")),
                "--no-progress", env={"DOCKER_HOST": docker_host})
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert "Harbor 0.24.0 has no agent 'terminus-9'" in lines[0], lines[0]
    assert server_stats(url)["total_requests"] == before
