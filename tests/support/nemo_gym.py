"""The suite's one NeMo Gym stack (`ng_run` started by `bench/support/nemo_gym.py`).

`ng_run` starts one Ray cluster for all its servers (50-100 s on a busy machine), so the
suite starts ONE: the session fixture `shared_gym` (registered in tests/conftest.py) runs
every server the Gym test modules need, and those modules share the xdist group
`GYM_GROUP` so one worker builds it once:

- `policy_model`: Gym's `openai_model` in front of nel's reference server (the agents' model;
  answers per prompt from `policy_answers` and `gym_harbor.policy_rows`, else
  `POLICY_DEFAULT`);
- `counter` (Gym's `example_session_state_mgmt`: a per-session counter) and its
  `simple_agent` `counter_agent`;
- `mcqa` (Gym's multiple-choice server, with its example rows);
- `nel_default` / `nel_compat`: `nel serve -b gsm8k` as Gym resources servers (default flags,
  `--gym-compat`), each with a `simple_agent` (only when the gsm8k data is available).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.support.nemo_gym import GymRun, gym_env, gym_site, start_gym, stop_gym
from nel_resources.runtime.processes import ManagedProcess

__all__ = ["GSM8K_N", "GYM_GROUP", "NEL_AGENTS", "POLICY_DEFAULT", "GymRun", "SharedGym", "gym_env",
           "shared_gym"]


#: The xdist group of every module that uses `shared_gym` (one worker, one `ng_run`).
GYM_GROUP = "nemo_gym"
#: The policy model's reply to a prompt no `policy_answers` row matches (it calls no tool).
POLICY_DEFAULT = "I did what you asked."
#: gsm8k problems `nel serve` serves in the stack.
GSM8K_N = 6
COUNTER = "example_session_state_mgmt"
#: nel serve flags per resources server (the launcher adds --host/-p from Gym's config).
SERVE_FLAGS = {
    "nel_default": ["-b", "gsm8k", "--max-problems", str(GSM8K_N), "--export-data", "{root}/data"],
    "nel_compat": ["-b", "gsm8k", "--max-problems", str(GSM8K_N), "--gym-compat"],
}
#: The simple_agent in front of each `nel serve` resources server.
NEL_AGENTS = {"nel_default_agent": "nel_default", "nel_compat_agent": "nel_compat"}
# Gym runs `python app.py` in the server's directory; this one becomes `nel serve` on the
# host and port Gym assigned it (read from the config Gym hands every server).
LAUNCHER = """\
import os, yaml
me = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])[os.environ["NEMO_GYM_CONFIG_PATH"]]
me = me["resources_servers"][{name!r}]
argv = [{python!r}, "-m", "dagster_project.cli.main", "serve", *{flags!r},
        "--host", str(me["host"]), "-p", str(me["port"])]
env = {{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}}
env["PYTHONPATH"] = {repo!r}
os.chdir({repo!r})
os.execve(argv[0], argv, env)
"""


@dataclass
class SharedGym:
    """The suite's one NeMo Gym stack (see the module docstring)."""

    gym: GymRun
    venv: Path
    root: Path
    policy: ManagedProcess  # the reference server behind `policy_model`
    policy_url: str  # the reference server behind `policy_model` (…/v1)
    counter_rows: list[dict[str, Any]]  # Gym's example rows of the counter server
    counter_recorded: Path  # Gym's recorded rollouts of the counter server (real model)
    mcqa_rows: Path  # a copy of Gym's mcqa example rows
    mcqa_letters: list[str]  # the policy model's letter per mcqa row
    gsm8k_gold: list[str] | None  # None: no gsm8k data here, no `nel serve` servers
    gsm8k_unavailable: str = ""

    @property
    def head_url(self) -> str:
        return self.gym.head_url

    @property
    def head_port(self) -> int:
        return int(self.gym.head_url.rsplit(":", 1)[1])

    def url(self, name: str) -> str:
        """The URL of server instance `name` (e.g. `counter`)."""
        return self.gym.urls[name]


def unique_lines(prompts: list[str]) -> list[str]:
    """Per prompt, a substring no other prompt has: the tail of its longest own line.

    (Instructions shared by every prompt must not be the key, or one answer fits all.)
    """
    out = []
    for i, prompt in enumerate(prompts):
        others = "\n".join(p for j, p in enumerate(prompts) if j != i)
        own = [line.strip()[-80:] for line in prompt.splitlines() if line.strip()]
        unique = [tail for tail in own if tail not in others]
        assert unique, f"prompt {i} has no line of its own"
        out.append(max(unique, key=len))
    return out


def policy_answers(gold: list[str] | None, prompts: list[str],
                   mcqa: list[dict[str, Any]]) -> tuple[list[dict[str, str]], list[str]]:
    """The policy model's answers: gsm8k item i right (i % 3 == 0), off by one (1) or "42"
    (2), and every other mcqa row the right letter, so equal rewards mean something.

    Returns:
        (reference-server answer rows, the letter answered per mcqa row).
    """
    rows: list[dict[str, str]] = []
    for i, (g, key) in enumerate(zip(gold or [], unique_lines(prompts) if gold else [],
                                     strict=True)):
        content = (f"Adding it up.\n#### {g}" if i % 3 == 0 else
                   f"#### {int(float(g)) + 1}" if i % 3 == 1 else "The answer is 42.")
        rows.append({"match": key, "content": content})
    letters = []
    contents = [row["responses_create_params"]["input"][0]["content"] for row in mcqa]
    for i, (row, key) in enumerate(zip(mcqa, unique_lines(contents), strict=True)):
        gold_letter = row["expected_answer"]
        letter = gold_letter if i % 2 == 0 else ("A" if gold_letter != "A" else "B")
        letters.append(letter)
        rows.append({"match": key, "content": f"Thinking done. \\boxed{{{letter}}}"})
    return rows, letters


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_shared_gym(root: Path) -> SharedGym:
    """Start the suite's Gym stack under `root` (see the module docstring)."""
    import asyncio
    import sys

    from nel_resources.reference_server import start_reference_server
    from tests.support import gym_harbor
    from tests.support.peers import peer_gym_venv
    from tests.support.realcomponents import REPO_ROOT

    venv = peer_gym_venv()
    site = gym_site(venv)
    counter_data = site / "resources_servers" / COUNTER / "data"
    mcqa_source = site / "resources_servers" / "mcqa" / "data" / "example.jsonl"
    mcqa = _jsonl(mcqa_source)
    mcqa_rows = root / "mcqa_example.jsonl"
    mcqa_rows.write_text(mcqa_source.read_text())
    gold: list[str] | None = None
    prompts: list[str] = []
    why = ""
    try:
        from benchmarks.serve import build_environment

        env = build_environment("gsm8k", max_problems=GSM8K_N)
        seeds = [asyncio.run(env.seed(i)) for i in range(GSM8K_N)]
        gold, prompts = [s.expected_answer for s in seeds], [s.prompt for s in seeds]
    except Exception as exc:  # the dataset lives in NEL_DATA_DIR; the gsm8k tests skip
        why = f"gsm8k data not available: {exc}"
    answers, letters = policy_answers(gold, prompts, mcqa)
    answers += gym_harbor.policy_rows()  # the Harbor tasks of test_gym_harbor_e2e.py
    ref, ref_url = start_reference_server(answers=answers, default_content=POLICY_DEFAULT,
                                          log_path=root / "policy.log")
    servers: dict[str, dict[str, Any]] = {
        "policy_model": {"responses_api_models": {"openai_model": {
            "entrypoint": "app.py", "openai_base_url": ref_url, "openai_api_key": "unused",
            "openai_model": "reference"}}},
        "counter": {"resources_servers": {COUNTER: {"entrypoint": "app.py", "domain": "agent"}}},
        "counter_agent": _agent("counter"),
        "mcqa": {"resources_servers": {"mcqa": {"entrypoint": "app.py", "domain": "knowledge"}}},
    }
    if gold is not None:
        for name, flags in SERVE_FLAGS.items():
            server_dir = root / "resources_servers" / name
            server_dir.mkdir(parents=True)
            (server_dir / "requirements.txt").write_text("")  # marks a local server dir for Gym
            (server_dir / "app.py").write_text(LAUNCHER.format(
                name=name, python=sys.executable, repo=str(REPO_ROOT),
                flags=[f.format(root=root) for f in flags]))
            servers[name] = {"resources_servers": {name: {"entrypoint": "app.py",
                                                          "domain": "math"}}}
        for agent, resources in NEL_AGENTS.items():
            servers[agent] = _agent(resources)
    try:
        gym = start_gym(venv, root, servers)
    except BaseException:
        ref.stop()
        raise
    return SharedGym(gym, venv, root, ref, ref_url, _jsonl(counter_data / "example.jsonl"),
                     counter_data / "example_rollouts.jsonl", mcqa_rows, letters, gold, why)


def _agent(resources: str) -> dict[str, Any]:
    return {"responses_api_agents": {"simple_agent": {
        "entrypoint": "app.py",
        "resources_server": {"type": "resources_servers", "name": resources},
        "model_server": {"type": "responses_api_models", "name": "policy_model"}}}}


@pytest.fixture(scope="session")
def shared_gym(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGym]:
    """The suite's one NeMo Gym stack; stopped (with every process it started) at the end."""
    stack = start_shared_gym(tmp_path_factory.mktemp("shared_gym"))
    try:
        yield stack
    finally:
        try:
            stop_gym(stack.gym)
        finally:
            stack.policy.stop()
