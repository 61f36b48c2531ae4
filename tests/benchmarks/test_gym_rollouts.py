"""The real NeMo Gym against nel, both ways.

- NeMo Gym's own stack (`ng_run`: head server, Ray, its `simple_agent`, its `openai_model`
  in front of our reference server as the policy model) uses `nel serve` as its resources
  server, once with default flags and once with `--gym-compat`; `ng_collect_rollouts`
  collects every rollout of the rows `nel serve --export-data` wrote, exits 0, and the
  rewards equal a direct `nel eval run` of the same benchmark item by item.
- nel's `gym://host:port?protocol=native&data=rows.jsonl` client runs `nel eval run`
  against a real NeMo Gym resources server (its `mcqa`, with its own example rows).

The Gym stack is the suite's shared one (`shared_gym`, tests/support/nemo_gym.py): Ray and
Gym's servers start once for every Gym test module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import run_nel
from tests.support.nemo_gym import GSM8K_N as N
from tests.support.nemo_gym import GYM_GROUP, NEL_AGENTS, SharedGym, gym_env
from tests.support.peers import peer_gym_venv
from tests.support.realcomponents import require_real_component

pytestmark = pytest.mark.xdist_group(GYM_GROUP)
AGENTS = NEL_AGENTS


@pytest.fixture(scope="module")
def gym_stack(shared_gym: SharedGym) -> SharedGym:
    """The shared stack, with its `nel serve` servers (they need the gsm8k data)."""
    if shared_gym.gsm8k_gold is None:
        require_real_component(shared_gym.gsm8k_unavailable)
    return shared_gym


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
def collected(gym_stack: SharedGym) -> Collected:
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
        cwd=root, env=gym_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        native_url = (f"gym://{gym_stack.url('mcqa').removeprefix('http://')}?protocol=native"
                      f"&data={gym_stack.mcqa_rows}")
        eval_out = root / "direct"
        eval_run = run_nel("eval", "run", "-b", "gsm8k", "-b", native_url, "--first-n", "-m",
                           str(N), "--model-url", gym_stack.policy_url, "--model-id", "reference",
                           "-o", str(eval_out), "--no-progress")
        out, err = collect.communicate(timeout=600)
    finally:
        if collect.poll() is None:
            os.killpg(collect.pid, signal.SIGKILL)
            collect.wait()
    return Collected(subprocess.CompletedProcess(collect.args, collect.returncode, out, err),
                     output, eval_run, eval_out, native_url)


def test_ng_collect_rollouts_against_nel_serve_equals_direct_run(
        gym_stack: SharedGym, collected: Collected) -> None:
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
        gym_stack: SharedGym, collected: Collected) -> None:
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
    assert [r[2] for r in rows] == gym_stack.mcqa_letters
    assert [r[1] for r in rows] == [float(a == g) for a, g in zip(gym_stack.mcqa_letters, gold,
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


def test_native_without_data_against_a_nemo_gym_resources_server_is_one_line(
        gym_stack: SharedGym, tmp_path: Path) -> None:
    """A real Gym resources server holds no problems (no /dataset_size): nel's run refuses in
    one line naming the fix, before any model request; NeMo Evaluator 0.3.0's own run of the
    same benchmark stops on it too."""
    from nel_resources.reference_server import start_reference_server
    from tests.support.peers import run_peer_nemo
    from tests.support.reference import server_stats

    name = f"gym://{gym_stack.url('mcqa').removeprefix('http://')}?protocol=native"
    model, url = start_reference_server()
    try:
        p = run_nel("eval", "run", "-b", name, "--model-url", url, "--model-id", "ref",
                    "-o", str(tmp_path / "out"), "--no-progress")
        assert server_stats(url)["total_requests"] == 0
    finally:
        model.stop()
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
    assert p.returncode != 0 and len(errors) == 1, p.stderr
    assert "has no /dataset_size" in errors[0] and "add data=ROWS.jsonl" in errors[0], errors
    assert "Traceback" not in p.stderr
    peer = run_peer_nemo("eval", "run", "-b", name, "--model-url", url, "--model-id", "ref",
                         "-o", str(tmp_path / "peer"), timeout=180)
    assert peer.returncode != 0 and "invalid dataset_size=-1" in peer.stdout + peer.stderr
