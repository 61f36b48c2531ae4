"""nel's launcher against the vLLM / SGLang / TRT-LLM stand-ins of tests/support/gpu_servers:
each is started with its real command line, waited for on `/health` (which answers only
after the stand-in's delay), answers chat completions under its served name, and is gone
after stop; a flag the real tool does not know, or too few GPUs, fails the start with the
server's own log lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import pid_alive
from nel_resources.services.launch import LaunchedService
from tests.support.gpu_servers import stand_in_env
from tests.support.reference import http_json

TYPES = ["vllm", "sglang", "trt_llm"]


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    record = tmp_path / "record.jsonl"
    for k, v in stand_in_env(record, delay="1.0").items():
        monkeypatch.setenv(k, v)
    return record


@pytest.mark.parametrize("typ", TYPES)
def test_each_server_starts_waits_on_health_serves_and_stops(typ: str, tmp_path: Path,
                                                              stand_ins: Path) -> None:
    svc = ServiceConfig(type=typ, model_path="org/model", model="served", tensor_parallel_size=2,
                        startup_timeout=120, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    server = LaunchedService("m", svc, tmp_path / "logs")
    try:
        url = server.start()
        assert server.health_url.endswith("/health")
        status, _, body = http_json("POST", f"{url}/chat/completions",
                                    {"model": "served", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and body["choices"][0]["message"]["content"], body
        rec = json.loads(stand_ins.read_text().splitlines()[-1])
        assert rec["cuda_visible_devices"] == "0,1" and rec["pid"] == server.pid
        assert rec["argv"] == _tool_args(server.argv), (rec["argv"], server.argv)
    finally:
        server.stop()
    assert server.pid is not None and not pid_alive(server.pid)
    assert "Loading model weights" in server.log_path.read_text()


@pytest.mark.parametrize(("typ", "says"), [("vllm", "unrecognized arguments: --no-such-flag"),
                                           ("sglang", "unrecognized arguments: --no-such-flag"),
                                           ("trt_llm", "No such option: --no-such-flag")])
def test_an_unknown_flag_fails_the_start_with_the_tools_message(typ: str, says: str, tmp_path: Path,
                                                               stand_ins: Path) -> None:
    svc = ServiceConfig(type=typ, model_path="org/model", extra_args=["--no-such-flag"],
                        startup_timeout=60, env={"CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(NelError, match="exited with status 2") as err:
        LaunchedService("m", svc, tmp_path / "logs").start()
    assert says in str(err.value)


def test_too_few_gpus_fails_with_the_log_tail(tmp_path: Path, stand_ins: Path) -> None:
    svc = ServiceConfig(type="vllm", model_path="org/model", tensor_parallel_size=4,
                        startup_timeout=60, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(NelError, match=r"4 GPUs are needed .* but 2 are visible"):
        LaunchedService("m", svc, tmp_path / "logs").start()


def _tool_args(argv: list[str]) -> list[str]:
    """What the tool itself sees of nel's command line (after `python -m sglang.launch_server`)."""
    return argv[3:] if argv[1:3] == ["-m", "sglang.launch_server"] else argv[1:]


def test_the_ray_stand_in_takes_rays_flags_only_and_counts_the_nodes_that_joined(
        tmp_path: Path, stand_ins: Path) -> None:
    """`ray start --head`, a worker's `ray start --address`, `ray status`: Ray's output lines
    the multi-node script counts; an unknown flag exits 2 as Ray's CLI does."""
    import os
    import subprocess

    from nel_resources.runtime.processes import ManagedProcess, free_port
    from tests.support.waiting import wait_for

    bad = subprocess.run(["ray", "start", "--head", "--no-such-flag"], capture_output=True, text=True,
                         env=os.environ, timeout=60)
    assert bad.returncode == 2 and "No such option: --no-such-flag" in bad.stderr
    port = free_port()
    address = f"127.0.0.1:{port}"
    head = ManagedProcess(["ray", "start", "--head", f"--port={port}", "--num-gpus=4", "--block"],
                          log_path=tmp_path / "head.log")
    worker = ManagedProcess(["ray", "start", f"--address={address}", "--num-gpus=4", "--block"],
                            log_path=tmp_path / "worker.log", env={"SLURM_NODEID": "1"})

    def nodes() -> int:
        out = subprocess.run(["ray", "status", f"--address={address}"], capture_output=True, text=True,
                             env=os.environ, timeout=60).stdout
        return sum(1 for ln in out.splitlines() if ln.startswith(" 1 node_"))

    with head, worker:
        wait_for(lambda: nodes() == 2, timeout=60, what="the worker to join the Ray head")
        # vLLM's Ray executor counts the GPUs of every node of the cluster (8), not this one's
        svc = ServiceConfig(type="vllm", model_path="org/model", tensor_parallel_size=4,
                            pipeline_parallel_size=2, startup_timeout=60,
                            extra_args=["--distributed-executor-backend", "ray"],
                            env={"RAY_ADDRESS": address, "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
        server = LaunchedService("m", svc, tmp_path / "logs")
        try:
            server.start()
        finally:
            server.stop()
    assert "Ray cluster at" in server.log_path.read_text() and "2 node(s), 8 GPU(s)" in server.log_path.read_text()
    lone = ServiceConfig(type="vllm", model_path="org/model", tensor_parallel_size=4, startup_timeout=60,
                         extra_args=["--distributed-executor-backend", "ray"],
                         env={"RAY_ADDRESS": address, "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    with pytest.raises(NelError, match="no Ray cluster at RAY_ADDRESS"):
        LaunchedService("m", lone, tmp_path / "logs2").start()
