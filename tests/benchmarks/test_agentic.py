"""Agent benchmarks (NeMo Evaluator 0.3.0's agentic built-ins) from local task files: each
name is refused in one line naming where nel looked when there are none; Harbor-format task
directories written here in the real layout load into seeds carrying what a tool-calling
solver needs; `harbor://name@version` reads NeMo Evaluator's cache layout; `nel list`,
`nel data info` and `nel eval run` say the same. The `harbor` and `openclaw` solvers, which
cannot run on this machine, are refused in one line before any request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks import get_benchmark
from benchmarks.agentic import AGENT_BENCHMARKS, HarborTaskSet
from benchmarks.errors import DataMissingError
from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from tests.support.cli import run_nel

TASKS = {
    "fix-greeting": {
        "instruction": "The script /app/greet.sh prints `helo`; make it print `hello`.\n",
        "toml": '[metadata]\ncategory = "debugging"\n\n[agent]\ntimeout_sec = 600.0\n\n'
                '[verifier]\ntimeout_sec = 120.0\n',
        "dockerfile": "FROM localdebian:bookworm-py\nWORKDIR /app\nCOPY greet.sh /app/greet.sh\n",
        "tests": {"test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n"
                             "if [ \"$(bash /app/greet.sh)\" = hello ]; then echo 1 > "
                             "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
                  "expected.txt": "hello\n"},
    },
    "count-lines": {
        "instruction": "Write the number of lines of /data/in.txt to /app/out.txt.\n",
        "toml": '[environment]\ndocker_image = "nel-tasks/count-lines:1"\n',
        "dockerfile": "FROM ignored:latest\nWORKDIR /srv\nWORKDIR /srv/work\n",
        "tests": {"test.sh": "#!/bin/bash\ntest \"$(cat /app/out.txt)\" = 3 && echo 1 > "
                             "/logs/verifier/reward.txt\n"},
    },
}


def write_tasks(root: Path) -> Path:
    """Harbor task directories in the real layout, plus a folder that is not a task."""
    for name, t in TASKS.items():
        d = root / name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(t["instruction"])
        (d / "task.toml").write_text(t["toml"])
        (d / "environment" / "Dockerfile").write_text(t["dockerfile"])
        for rel, text in t["tests"].items():
            (d / "tests" / rel).write_text(text)
    (root / "README-not-a-task").mkdir()
    return root


@pytest.fixture
def no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty data, cache and Harbor-cache roots."""
    monkeypatch.setenv("NEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HARBOR_DATASETS_DIR", str(tmp_path / "harbor"))
    monkeypatch.delenv("NMP_REPO", raising=False)
    return tmp_path


@pytest.mark.parametrize("name", sorted(AGENT_BENCHMARKS))
def test_each_agent_benchmark_is_refused_in_one_line_without_task_files(no_data: Path, name: str) -> None:
    with pytest.raises(DataMissingError) as exc:
        get_benchmark(name)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{name}: no local task files in ")
    assert str(no_data / "data" / name) in msg and f"nel data info {name}" in msg


def test_terminal_bench_task_dirs_load_into_seeds_a_tool_calling_solver_can_run(no_data: Path) -> None:
    write_tasks(no_data / "data" / "terminal-bench-v1")
    env = get_benchmark("terminal-bench-v1")
    assert isinstance(env, HarborTaskSet) and len(env) == 2
    count, fix = asyncio.run(env.seed(0)), asyncio.run(env.seed(1))  # name order
    assert fix.prompt == TASKS["fix-greeting"]["instruction"]
    m = fix.metadata
    assert m["task_id"] == "fix-greeting" and m["category"] == "debugging"
    assert m["verifier_command"] == "bash /tests/test.sh" and m["tests_dir"] == "/tests"
    assert m["tests"] == TASKS["fix-greeting"]["tests"]
    assert m["reward_file"] == "/logs/verifier/reward.txt"
    assert m["agent_timeout_s"] == 600.0 and m["verifier_timeout_s"] == 120.0
    # /tests and /logs: per-sample scratch mounts the verifier writes to
    scratch = ["/tests", "/logs"]
    # its Dockerfile COPYs: its build context rides along (an ecs_fargate block builds it)
    assert fix.sandbox_spec == {"image": "localdebian:bookworm-py", "workdir": "/app",
                                "scratch_dirs": scratch, "environment_dir": str(
                                    no_data / "data" / "terminal-bench-v1" / "fix-greeting"
                                    / "environment")}
    # task.toml's docker_image wins over the Dockerfile's FROM; the last WORKDIR counts
    assert count.sandbox_spec == {"image": "nel-tasks/count-lines:1", "workdir": "/srv/work",
                                  "scratch_dirs": scratch}
    assert count.metadata["agent_timeout_s"] is None
    # an edited test changes the fingerprint (shards rerun)
    before = env.fingerprint()
    (no_data / "data" / "terminal-bench-v1" / "count-lines" / "tests" / "test.sh").write_text("exit 1\n")
    assert get_benchmark("terminal-bench-v1").fingerprint() != before


def test_a_task_without_its_verifier_is_refused(no_data: Path) -> None:
    root = write_tasks(no_data / "tasks")
    (root / "count-lines" / "tests" / "test.sh").unlink()
    with pytest.raises(Exception, match=r"task count-lines: no tests/test.sh in "):
        get_benchmark("swebench-verified", tasks_dir=str(root))


def test_harbor_uri_reads_nemo_evaluators_cache_layout(no_data: Path) -> None:
    write_tasks(no_data / "harbor" / "org__suite@2.0")
    env = get_benchmark("harbor://org/suite@2.0")
    assert len(env) == 2 and asyncio.run(env.seed(0)).metadata["task_id"] == "count-lines"
    with pytest.raises(DataMissingError, match=r"no local Harbor task cache at .*other@1\.0"):
        get_benchmark("harbor://other@1.0")


def config(tmp_path: Path, bench: dict[str, Any]) -> Path:
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump({
        "services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
        "benchmarks": [{"solver": {"service": "m"}, **bench}],
        "output": {"dir": str(tmp_path / "out")}}))
    return path


@pytest.mark.parametrize(("bench", "key", "says"), [
    ({"name": "gsm8k", "solver": {"type": "harbor", "service": "m", "agent": "terminus-2",
                                  "harbor_bin": "/nonexistent/harbor"}},
     "benchmarks.0.solver.harbor_bin", "Harbor's CLI `/nonexistent/harbor` is not on PATH"),
    ({"name": "gsm8k", "solver": {"type": "harbor", "service": "m", "agent": "terminus-2"}},
     "benchmarks.0.sandbox", "the 'harbor' solver runs its agent in the sample's sandbox"),
    ({"name": "gsm8k", "solver": {"type": "openclaw", "service": "m"}},
     "benchmarks.0.solver.openclaw_bin", "the OpenClaw CLI `openclaw` is not on PATH"),
    ({"name": "harbor://terminal-bench@2.0"}, "benchmarks.0.name",
     "no local Harbor task cache at"),
], ids=["harbor", "harbor-no-sandbox", "openclaw", "harbor-uri"])
def test_what_cannot_run_here_is_refused_in_one_line(no_data: Path, bench: dict[str, Any], key: str,
                                                    says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_supported(load_config(config(no_data, bench)))
    msg = str(exc.value)
    assert "\n" not in msg and f"key {key}: " in msg and says in msg


def test_cli_lists_explains_and_refuses_agent_benchmarks(tmp_path: Path) -> None:
    env = {"NEL_DATA_DIR": str(tmp_path / "data"), "NEL_CACHE_DIR": str(tmp_path / "cache"),
           "HARBOR_DATASETS_DIR": str(tmp_path / "harbor")}
    listing = run_nel("list", env=env)
    assert listing.returncode == 0
    rows = [ln for ln in listing.stdout.splitlines() if "(needs local task files)" in ln]
    assert sorted(ln.split()[0] for ln in rows) == sorted(AGENT_BENCHMARKS)
    info = run_nel("data", "info", "pinchbench", env=env)
    assert info.returncode == 0 and f"missing  {tmp_path / 'data' / 'pinchbench'}" in info.stdout
    assert "github.com/pinchbench/skill" in info.stdout
    # the simple solver's model cannot act in the task's sandbox: refused before any request
    write_tasks(tmp_path / "data" / "terminal-bench-v1")
    cfg = config(tmp_path, {"name": "terminal-bench-v1", "sandbox": {"type": "local"},
                            "solver": {"type": "simple", "service": "m"}})
    proc = run_nel("eval", "run", str(cfg), "--no-progress", env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "key benchmarks.0.solver: 'terminal-bench-v1' is an agent benchmark" in lines[0]
    assert "`solver: {type: tool_calling, sandbox_tools: true}`" in lines[0]
    assert "`{type: harbor, agent: terminus-2}`" in lines[0]
    assert not (tmp_path / "out").exists()
