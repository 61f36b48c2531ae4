"""NVIDIA Dynamo deployments nel launches (nel_resources.services.dynamo) against the
stand-ins of tests/support/gpu_servers (real `nats-server` / `etcd` / `dynamo.frontend` /
`dynamo.sglang` flags, workers that register in etcd, a frontend whose `/health` answers 200
before any worker registered and that forwards to the registered worker).

The workers' command lines are NeMo Evaluator 0.3.0's own, checked against the real peer's
sbatch generator on the two example configs.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import pid_alive
from nel_resources.services import dynamo_commands as cmds
from nel_resources.services.launch import make_server
from tests.support.gpu_servers import stand_in_env
from tests.support.peers import peer_nemo_bin
from tests.support.proc_tree import tree_pids
from tests.support.reference import http_json

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "nemo_configs" / "examples"
COPIES = ["15c_slurm_gsm8k_dynamo", "15d_slurm_gsm8k_dynamo_disagg"]


def _example_service(stem: str) -> tuple[str, dict[str, Any]]:
    raw = yaml.safe_load((EXAMPLES / f"{stem}.yaml").read_text().replace("${SHARED_ROOT:-placeholder}",
                                                                          "placeholder"))
    ((name, svc),) = raw["services"].items()
    return name, svc


_PEER_LINES = """
import re, sys, yaml
from nemo_evaluator.config import parse_eval_config
from nemo_evaluator.orchestration.slurm_gen import generate_sbatch
raw = yaml.safe_load(open(sys.argv[1]).read().replace("${SHARED_ROOT:-placeholder}", "placeholder"))
script = generate_sbatch(parse_eval_config(raw))[0]
for line in script.splitlines():
    if re.match(r"\\s*(python3 -m dynamo\\.|nats-server |etcd )", line):
        print(line.split(" >> ")[0].strip())
"""


@pytest.mark.parametrize("stem", COPIES)
def test_the_commands_are_nemo_evaluators_on_its_own_examples(stem: str) -> None:
    """0.3.0's sbatch for the example vs nel's commands for the same service: the workers
    word for word; NATS, etcd and the frontend with 0.3.0's flags (nel adds its ports and
    directories, and the frontend's bind address)."""
    python = peer_nemo_bin().parent / "python"
    out = subprocess.run([str(python), "-c", _PEER_LINES, str(EXAMPLES / f"{stem}.yaml")],
                         capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    theirs = [line.split() for line in out]
    _, raw = _example_service(stem)
    svc = ServiceConfig.model_validate(raw)
    ours_workers = [cmds.worker_command("python3", svc, w, 8000) for w in cmds.workers(svc)]
    assert [t for t in theirs if t[:3] == ["python3", "-m", "dynamo.sglang"]] == ours_workers
    nats, etcd, front = (next(t for t in theirs if t[0] == p or t[:3] == ["python3", "-m", p])
                         for p in ("nats-server", "etcd", "dynamo.frontend"))
    ours = {"nats": cmds.nats_command("127.0.0.1", 4222, "d"), "etcd": cmds.etcd_command("127.0.0.1", 2379, 2380, "d"),
            "front": cmds.frontend_command("python3", "127.0.0.1", 8000)}
    assert nats == ["nats-server", "-js"] and ours["nats"][:2] == nats
    assert [a for a in etcd if a.startswith("--")] == ["--listen-client-urls", "--advertise-client-urls"]
    assert all(f in ours["etcd"] for f in etcd if f.startswith("--"))
    assert front == ["python3", "-m", "dynamo.frontend", "--http-port", "8000"]
    assert ours["front"][-2:] == front[-2:] and ours["front"][:3] == front[:3]


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    record = tmp_path / "record.jsonl"
    for k, v in stand_in_env(record, delay="1.0").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    return record


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("stem", COPIES)
def test_the_example_deployment_starts_registers_serves_and_is_gone_after_stop(
        stem: str, tmp_path: Path, stand_ins: Path) -> None:
    _, raw = _example_service(stem)
    # 4 GPUs here: tp 4 aggregated, 2 + 2 disaggregated (the workers share this node)
    for block in ([raw] if "prefill" not in raw else [raw["prefill"], raw["decode"]]):
        block["tensor_parallel_size"] = 4 if "prefill" not in raw else 2
    raw.update(startup_timeout=120, port=None)
    svc = ServiceConfig.model_validate(raw)
    server = make_server("d", svc, tmp_path / "logs")
    try:
        url = server.start()
        # Ready means every worker registered, as the frontend's /health says.
        _, _, health = http_json("GET", server.health_url)
        comps = sorted(i["component"] for i in health["instances"])
        assert comps == (["backend"] if "prefill" not in raw else ["decode", "prefill"]), health
        status, _, body = http_json("POST", f"{url}/chat/completions",
                                    {"model": "glm5", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and body["choices"][0]["message"]["content"], body
        # (the workers start side by side: their records come in either order)
        started = sorted((r for r in _records(stand_ins) if r["tool"] == "dynamo.sglang"),
                         key=lambda r: r["role"] != "prefill")
        # what each worker was asked is nel's command after `python -m dynamo.sglang`
        assert [r["argv"] for r in started] == [p.argv[3:] for _, p in server.workers.procs]
        env = started[0]["env"]
        assert env["DYN_REQUEST_PLANE"] == "nats" and env["NATS_SERVER"].startswith("nats://127.0.0.1:")
        assert env["UCX_TLS"] == (raw.get("extra_env") or raw["prefill"]["extra_env"])["UCX_TLS"]
        # Workers sharing a node take distinct GPUs.
        assert [r["cuda_visible_devices"] for r in started] == (
            ["0,1,2,3"] if len(started) == 1 else ["0,1", "2,3"])
        (fwd,) = [r for r in _records(stand_ins) if r["tool"] == "dynamo.frontend"]
        assert fwd["to"] == ("backend" if "prefill" not in raw else "decode")
        pids = [server.pid, *(p.pid for p in server._infra), *(p.pid for _, p in server.workers.procs)]
        kids = [k for p in pids for k, _ in tree_pids(p)]  # the engines behind the workers too
    finally:
        server.stop()
    assert not any(pid_alive(p) for p in [*pids, *kids])
    names = sorted(p.name for p in (tmp_path / "logs").glob("*.log"))
    assert "d.log" in names and "d.nats.log" in names and "d.etcd.log" in names


def test_a_worker_that_never_registers_fails_the_start_with_its_log(tmp_path: Path, stand_ins: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_STANDIN_DYNAMO_STUCK", "decode")
    svc = ServiceConfig.model_validate({"type": "dynamo", "model": "m", "startup_timeout": 6,
                                        "prefill": {}, "decode": {}})
    server = make_server("d", svc, tmp_path / "logs")
    with pytest.raises(NelError) as err:
        server.start()
    msg = str(err.value)
    assert re.search(r"did not become healthy: after 6 s the Dynamo frontend .* counts 0 of 1 decode "
                     r"worker\(s\) registered", msg), msg
    assert "d.decode-0.log ends with:" in msg and "Loading model weights ... (stuck)" in msg, msg
    assert not server.is_running() and all(not p.is_running() for _, p in server.workers.procs)


def test_a_worker_flag_sglang_does_not_know_fails_at_once_with_its_message(tmp_path: Path, stand_ins: Path) -> None:
    svc = ServiceConfig.model_validate({"type": "dynamo", "model": "m", "startup_timeout": 60,
                                        "extra_args": ["--no-such-flag"]})
    with pytest.raises(NelError, match=r"(?s)backend-0 worker exited with status 2.*unrecognized arguments: "
                                       r"--no-such-flag") as err:
        make_server("d", svc, tmp_path / "logs").start()
    assert "\n" in str(err.value)  # the log's last lines follow
