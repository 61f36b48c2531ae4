"""The real NeMo Gym against nel, both ways.

- NeMo Gym's own stack (`ng_run`: head server, Ray, its `simple_agent`, its `openai_model`
  in front of our reference server as the policy model) uses `nel serve` as its resources
  server, once with default flags and once with `--gym-compat`; `ng_collect_rollouts`
  collects every rollout of the rows `nel serve --export-data` wrote, exits 0, and the
  rewards equal a direct `nel eval run` of the same benchmark item by item.
- nel's `gym://host:port?protocol=native&data=rows.jsonl` client runs `nel eval run`
  against a real NeMo Gym resources server (its `mcqa`, with its own example rows).

Everything is started once for the module (Ray alone takes many seconds). Gym would build
a uv venv per server; the test points each server's venv at the one `make peers` installed
(`skip_venv_if_present`), so Gym installs nothing and never reaches the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nel_resources.processes import ManagedProcess
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel
from tests.support.peers import peer_gym_venv
from tests.support.realcomponents import REPO_ROOT, require_real_component
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S, wait_for

N = 6  # gsm8k problems served and evaluated
AGENTS = {"nel_default_agent": "nel_default", "nel_compat_agent": "nel_compat"}
# nel serve flags per resources server (the launcher adds --host/-p from Gym's config)
SERVE_FLAGS = {
    "nel_default": ["-b", "gsm8k", "--max-problems", str(N), "--export-data", "{root}/data"],
    "nel_compat": ["-b", "gsm8k", "--max-problems", str(N), "--gym-compat"],
}
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _matches(prompts: list[str]) -> list[str]:
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


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (Ray's workers leave our process group, not our session)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def _stop_gym(proc: ManagedProcess) -> None:
    """SIGINT `ng_run` (it then stops its servers and its Ray cluster), then kill leftovers."""
    sid = proc.pid
    if proc.is_running():
        os.kill(sid, signal.SIGINT)
        with contextlib.suppress(BaseException):  # what is left is killed below
            wait_for(lambda: not _session_members(sid), timeout=60, what="ng_run to shut down")
    proc.stop()
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class GymStack:
    root: Path
    venv: Path
    head_port: int
    ref_url: str
    gsm8k_gold: list[str]
    mcqa_rows: Path
    mcqa_answers: list[str]
    ports: dict[str, int] = field(default_factory=dict)

    def gym_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
        env["PYTHONPATH"] = ""  # our modules stay out of Gym's interpreters
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray binds 127.0.0.1 only
        return env


def _answers(gold: list[str], prompts: list[str], mcqa: list[dict[str, Any]]) -> tuple[
        list[dict[str, str]], list[str]]:
    """Reference-server answers: a mix of right and wrong, so equal rewards mean something."""
    rows = []
    for i, (g, key) in enumerate(zip(gold, _matches(prompts), strict=True)):
        if i % 3 == 0:
            rows.append({"match": key, "content": f"Adding it up.\n#### {g}"})
        elif i % 3 == 1:
            rows.append({"match": key, "content": f"#### {int(float(g)) + 1}"})
        # i % 3 == 2: the server's default answer ("The answer is 42.")
    letters = []
    contents = [row["responses_create_params"]["input"][0]["content"] for row in mcqa]
    for i, (row, key) in enumerate(zip(mcqa, _matches(contents), strict=True)):
        gold_letter = row["expected_answer"]
        letter = gold_letter if i % 2 == 0 else ("A" if gold_letter != "A" else "B")
        letters.append(letter)
        rows.append({"match": key, "content": f"Thinking done. \\boxed{{{letter}}}"})
    return rows, letters


@pytest.fixture(scope="module")
def gym_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GymStack]:
    import asyncio

    from benchmarks.serve import build_environment

    venv = peer_gym_venv()
    try:
        env = build_environment("gsm8k", max_problems=N)
        seeds = [asyncio.run(env.seed(i)) for i in range(N)]
    except Exception as exc:  # the dataset lives in NEL_DATA_DIR
        require_real_component(f"gsm8k data not available: {exc}")
    site = next((venv / "lib").glob("python3*/site-packages"))
    mcqa_source = site / "resources_servers" / "mcqa" / "data" / "example.jsonl"
    mcqa = [json.loads(line) for line in mcqa_source.read_text().splitlines() if line.strip()]
    answers, letters = _answers([s.expected_answer for s in seeds], [s.prompt for s in seeds], mcqa)

    root = tmp_path_factory.mktemp("gym")
    mcqa_rows = root / "mcqa_example.jsonl"
    mcqa_rows.write_text(mcqa_source.read_text())
    ref, ref_url = start_reference_server(answers=answers, log_path=root / "reference.log")
    stack = GymStack(root, venv, _free_port(), ref_url, [s.expected_answer for s in seeds],
                     mcqa_rows, letters)
    servers: dict[str, dict[str, Any]] = {
        "policy_model": {"responses_api_models": {"openai_model": {
            "entrypoint": "app.py", "openai_base_url": ref_url, "openai_api_key": "unused",
            "openai_model": "reference"}}},
        "mcqa": {"resources_servers": {"mcqa": {"entrypoint": "app.py", "domain": "knowledge"}}},
    }
    for name, flags in SERVE_FLAGS.items():
        server_dir = root / "resources_servers" / name
        server_dir.mkdir(parents=True)
        (server_dir / "requirements.txt").write_text("")  # marks a local server dir for Gym
        (server_dir / "app.py").write_text(LAUNCHER.format(
            name=name, python=sys.executable, repo=str(REPO_ROOT),
            flags=[f.format(root=root) for f in flags]))
        servers[name] = {"resources_servers": {name: {"entrypoint": "app.py", "domain": "math"}}}
    for agent, resources in AGENTS.items():
        servers[agent] = {"responses_api_agents": {"simple_agent": {
            "entrypoint": "app.py",
            "resources_server": {"type": "resources_servers", "name": resources},
            "model_server": {"type": "responses_api_models", "name": "policy_model"}}}}
    for config in servers.values():
        ((kind, inner),) = config.items()
        ((name, _),) = inner.items()
        link = root / "venvs" / kind / name / ".venv"
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(venv)
    config_file = root / "gym.yaml"
    # JSON is YAML: Gym reads this with OmegaConf.
    config_file.write_text(json.dumps({
        "head_server": {"host": "127.0.0.1", "port": stack.head_port},
        "default_host": "127.0.0.1",
        "uv_venv_dir": str(root / "venvs"),
        "skip_venv_if_present": True,
        **servers,
    }, indent=1))
    proc = ManagedProcess([str(venv / "bin" / "ng_run"), f"+config_paths=[{config_file}]"],
                          cwd=root, env=stack.gym_env(), log_path=root / "ng_run.log",
                          name="ng_run")
    proc.start()
    try:
        head = f"http://127.0.0.1:{stack.head_port}/global_config_dict_yaml"
        config = wait_for(lambda: _get_json(head), timeout=PROCESS_START_S * 2, alive=proc,
                          what="NeMo Gym's head server (ng_run) to answer")
        if isinstance(config, str):  # the head server answers YAML
            import yaml

            config = yaml.safe_load(config)
        for name in servers:
            ((_, inner),) = config[name].items()
            ((_, spec),) = inner.items()
            stack.ports[name] = int(spec["port"])
        for name, port in stack.ports.items():
            wait_for(lambda p=port: _answers_http(p), timeout=PROCESS_START_S * 2, alive=proc,
                     what=f"Gym server {name} on port {port} to answer")
        yield stack
    finally:
        _stop_gym(proc)
        ref.stop()


def _get_json(url: str) -> Any:
    try:
        status, _, body = http_json("GET", url, timeout=5)
    except OSError:
        return None
    return body if status == 200 else None


def _answers_http(port: int) -> bool:
    try:
        http_json("GET", f"http://127.0.0.1:{port}/", timeout=5)
    except OSError:
        return False
    return True


def _direct_rewards(out: Path, bench_dir: str) -> dict[int, float]:
    import duckdb

    rows = duckdb.sql(
        "select problem_idx, reward from read_parquet(?, hive_partitioning=true)",
        params=[str(out / bench_dir / "shard_results" / "**" / "*.parquet")],
    ).fetchall()
    return {int(i): float(r) for i, r in rows}


@dataclass
class Collected:
    """What the module's two tests check: Gym's rollouts and one `nel eval run`."""

    collect: subprocess.CompletedProcess[str]
    rollouts: Path
    eval_run: subprocess.CompletedProcess[str]
    eval_out: Path
    native_url: str


@pytest.fixture(scope="module")
def collected(gym_stack: GymStack) -> Collected:
    """`ng_collect_rollouts` and one `nel eval run` (gsm8k directly, mcqa through gym://),
    side by side: neither waits for the other."""
    root = gym_stack.root
    exported = root / "data" / "gsm8k.jsonl"  # written by `nel serve --export-data DIR`
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    # one input file for both agents: Gym sends each row to the agent its agent_ref names
    inputs = root / "rollout_inputs.jsonl"
    inputs.write_text("".join(json.dumps({**r, "agent_ref": {"name": agent}}) + "\n"
                              for agent in AGENTS for r in rows))
    output = root / "out" / "rollouts.jsonl"
    output.parent.mkdir()
    collect = subprocess.Popen(
        [str(gym_stack.venv / "bin" / "ng_collect_rollouts"), f"+input_jsonl_fpath={inputs}",
         f"+output_jsonl_fpath={output}",
         f"+head_server={{host: 127.0.0.1, port: {gym_stack.head_port}}}"],
        cwd=root, env=gym_stack.gym_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        native_url = (f"gym://127.0.0.1:{gym_stack.ports['mcqa']}?protocol=native"
                      f"&data={gym_stack.mcqa_rows}")
        eval_out = root / "direct"
        eval_run = run_nel("eval", "run", "-b", "gsm8k", "-b", native_url, "--first-n", "-m",
                           str(N), "--model-url", gym_stack.ref_url, "--model-id", "reference",
                           "-o", str(eval_out), "--no-progress")
        out, err = collect.communicate(timeout=600)
    finally:
        if collect.poll() is None:
            os.killpg(collect.pid, signal.SIGKILL)
            collect.wait()
    return Collected(subprocess.CompletedProcess(collect.args, collect.returncode, out, err),
                     output, eval_run, eval_out, native_url)


def test_ng_collect_rollouts_against_nel_serve_equals_direct_run(
        gym_stack: GymStack, collected: Collected) -> None:
    rows = [json.loads(line) for line in (gym_stack.root / "data" / "gsm8k.jsonl").read_text()
            .splitlines()]
    assert [r["uuid"] for r in rows] == [f"gsm8k-{i}" for i in range(N)]
    assert [r["expected_answer"] for r in rows] == gym_stack.gsm8k_gold
    collect = collected.collect
    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
    output = collected.rollouts
    rollouts = [json.loads(line) for line in output.read_text().splitlines()]
    failures = output.with_name("rollouts_failures.jsonl")
    assert not failures.exists() or not failures.read_text().strip()
    assert len(rollouts) == len(AGENTS) * N

    assert collected.eval_run.returncode == 0, collected.eval_run.stderr[-3000:]
    direct = _direct_rewards(collected.eval_out, "gsm8k")
    assert sorted(direct) == list(range(N))
    # the answers were chosen per item: right, off by one, the default "42"
    designed = {i: float(i % 3 == 0 or (i % 3 == 2 and gym_stack.gsm8k_gold[i] == "42"))
                for i in range(N)}
    assert direct == designed  # a mix, so the equality below means something
    for agent in AGENTS:
        got = {int(r["uuid"].rpartition("-")[2]): float(r["reward"])
               for r in rollouts if r["agent_ref"]["name"] == agent}
        assert got == direct, agent

    # ng_collect_rollouts called /aggregate_metrics (through each agent) on nel serve
    summary = json.loads(output.with_name("rollouts_aggregate_metrics.json").read_text())
    assert {entry["agent_ref"]["name"] for entry in summary} == set(AGENTS)
    mean = sum(direct.values()) / N
    for entry in summary:
        metrics = entry["agent_metrics"]
        assert metrics["mean/reward"] == pytest.approx(mean)
        assert entry["key_metrics"]["mean/reward"] == pytest.approx(mean)
        assert metrics["n_tasks"] == N and metrics["stderr/reward"] > 0
        assert len(entry["group_level_metrics"]) == N


def test_gym_native_client_against_a_nemo_gym_resources_server(
        gym_stack: GymStack, collected: Collected) -> None:
    """nel eval run -b 'gym://…?protocol=native&data=…' scored by NeMo Gym's mcqa server."""
    import duckdb

    assert collected.eval_run.returncode == 0, collected.eval_run.stderr[-3000:]
    out = collected.eval_out
    (bench_dir,) = [p.name for p in out.iterdir()
                    if p.name.startswith("gym_") and (p / "shard_results").is_dir()]
    rows = duckdb.sql(
        "select problem_idx, reward, extracted, expected from read_parquet(?, hive_partitioning=true)"
        " order by problem_idx",
        params=[str(out / bench_dir / "shard_results" / "**" / "*.parquet")],
    ).fetchall()
    gold = [json.loads(line)["expected_answer"]
            for line in gym_stack.mcqa_rows.read_text().splitlines()]
    # mcqa scores the boxed letter against the row's expected_answer, which nel sent
    assert [r[0] for r in rows] == list(range(len(gold)))
    assert [r[3] for r in rows] == gold
    assert [r[2] for r in rows] == gym_stack.mcqa_answers
    assert [r[1] for r in rows] == [float(a == g) for a, g in zip(gym_stack.mcqa_answers, gold,
                                                                   strict=True)]


GYM_AGGREGATE = """\
import json, sys
from nemo_gym.reward_profile import compute_aggregate_metrics
print(json.dumps(compute_aggregate_metrics(json.load(sys.stdin)).model_dump()))
"""


def test_aggregate_metrics_has_gyms_keys_and_values() -> None:
    """nel serve's /aggregate_metrics against NeMo Gym's own computation of the same input."""
    from benchmarks.serve_metrics import aggregate_metrics
    from tests.benchmarks.test_serve import _verify_responses

    venv = peer_gym_venv()
    responses = _verify_responses()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", GYM_AGGREGATE],
                          input=json.dumps(responses), capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    gym = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = aggregate_metrics({"verify_responses": responses})
    assert set(gym) == set(ours)
    for key, value in gym["agent_metrics"].items():
        assert ours["agent_metrics"][key] == pytest.approx(value), key
    assert ours["key_metrics"] == {k: v for k, v in ours["agent_metrics"].items()
                                   if k.startswith("mean/")}
    assert set(gym["key_metrics"]) <= set(ours["key_metrics"])
    assert len(ours["group_level_metrics"]) == len(gym["group_level_metrics"])
    for mine, theirs in zip(ours["group_level_metrics"], gym["group_level_metrics"], strict=True):
        for key, value in theirs.items():
            assert key in mine, key
            assert mine[key] == (pytest.approx(value) if isinstance(value, float) else value), key
