"""Launched model services: command lines, health waiting, teardown (stand-in servers for
vLLM/SGLang/TRT-LLM, the real llama.cpp server), and Ctrl-C of a real `nel eval run`."""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import os
import signal
import stat
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from benchmarks.errors import NelError
from nel_resources.config import ServiceConfig
from nel_resources.runtime.processes import pid_alive
from nel_resources.services.launch import (
    LaunchedModelService,
    LaunchedService,
    launched_service,
    service_command,
)
from tests.support.cli import start_nel
from tests.support.realcomponents import llama_model_path, require_real_component
from tests.support.waiting import PROCESS_START_S, wait_for

# A stand-in for vllm/sglang/trtllm-serve: records its argv, answers /v1/models after an
# optional delay, and ignores nothing (default signals).
STAND_IN = r'''#!{python}
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
open(os.environ["STANDIN_ARGV"], "w").write(json.dumps(args))
port = int(args[args.index("--port") + 1])
time.sleep(float(os.environ.get("STANDIN_DELAY", "0")))
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": "m"}}]}}).encode()
        self.send_response(200 if self.path in ("/v1/models", "/health") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        sys.stderr.write("request " + self.path + "\n")
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def stand_in_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir on PATH holding `vllm` and `trtllm-serve` stand-ins."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("vllm", "trtllm-serve"):
        p = bindir / name
        p.write_text(STAND_IN.format(python=sys.executable))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_ARGV", str(tmp_path / "argv.json"))
    return bindir


def test_command_lines_for_each_type(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    svc = ServiceConfig(type="vllm", model_path="org/model", model="served", tensor_parallel_size=4,
                        extra_args=["--max-model-len", "4096"])
    assert service_command("v", svc, 9001) == [
        "vllm", "serve", "org/model", "--host", "127.0.0.1", "--port", "9001",
        "--tensor-parallel-size", "4", "--served-model-name", "served", "--max-model-len", "4096"]
    sg = service_command("s", svc.model_copy(update={"type": "sglang"}), 9002)
    assert sg[1:3] == ["-m", "sglang.launch_server"] and sg[sg.index("--tp-size") + 1] == "4"
    assert sg[sg.index("--model-path") + 1] == "org/model" and sg[-2:] == ["--max-model-len", "4096"]
    trt = service_command("t", svc.model_copy(update={"type": "trt_llm"}), 9003)
    assert trt[:2] == ["trtllm-serve", "org/model"] and trt[trt.index("--tp_size") + 1] == "4"
    par = svc.model_copy(update={"pipeline_parallel_size": 2, "data_parallel_size": 3})
    v = service_command("v", par, 1)
    assert v[v.index("--pipeline-parallel-size") + 1] == "2" and v[v.index("--data-parallel-size") + 1] == "3"
    sg = service_command("s", par.model_copy(update={"type": "sglang"}), 1)
    assert sg[sg.index("--pp-size") + 1] == "2" and sg[sg.index("--dp-size") + 1] == "3"
    trt = service_command("t", par.model_copy(update={"type": "trt_llm", "data_parallel_size": None}), 1)
    assert trt[trt.index("--pp_size") + 1] == "2"
    with pytest.raises(NelError, match="trtllm-serve has no data parallelism"):
        service_command("t", par.model_copy(update={"type": "trt_llm"}), 1)
    ll = service_command("l", ServiceConfig(type="llama_cpp", model_path=str(gguf)), 9004)
    assert ll[1:3] == ["-m", "llama_cpp.server"] and ll[ll.index("--port") + 1] == "9004"
    assert ll[ll.index("--n_threads") + 1] == "1"
    assert ll[ll.index("--logits_all") + 1] == "true"  # echo + logprobs need every logit
    own = service_command("l", ServiceConfig(type="llama_cpp", model_path=str(gguf),
                                             extra_args=["--logits_all", "false"]), 1)
    assert own.count("--logits_all") == 1 and own[-1] == "false"
    with pytest.raises(NelError, match="GGUF file not found"):
        service_command("l", ServiceConfig(type="llama_cpp", model_path=str(tmp_path / "nope.gguf")), 1)
    with pytest.raises(NelError, match="needs `model_path`"):
        service_command("v", ServiceConfig(type="vllm"), 1)


def test_stand_in_vllm_health_wait_logs_and_teardown(tmp_path: Path, stand_in_bin: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("STANDIN_DELAY", "1.0")  # healthy only after a second: we must wait
    svc = ServiceConfig(type="vllm", model_path="org/model", tensor_parallel_size=2, startup_timeout=30)
    server = LaunchedService("v", svc, tmp_path / "logs")
    t0 = time.monotonic()
    url = server.start()
    assert time.monotonic() - t0 >= 1.0
    assert url == f"http://127.0.0.1:{server.port}/v1" and server.port > 0  # a free port was chosen
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:2] == ["serve", "org/model"] and argv[argv.index("--tensor-parallel-size") + 1] == "2"
    pid = server.pid
    assert pid is not None and pid_alive(pid)
    server.stop()
    assert not pid_alive(pid)
    assert "request /health" in (tmp_path / "logs" / "v.log").read_text()  # log kept


def test_health_timeout_and_early_exit_are_errors_and_leave_nothing(tmp_path: Path, stand_in_bin: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_DELAY", "30")
    svc = ServiceConfig(type="trt_llm", model_path="engine-dir", startup_timeout=1.0)
    server = LaunchedService("t", svc, tmp_path / "logs")
    with pytest.raises(NelError, match="did not become healthy"):
        server.start()
    assert server.pid is not None and not pid_alive(server.pid)
    # a command that exits at once: the error says so without waiting for the timeout
    bad = ServiceConfig(type="vllm", command=[sys.executable, "-c", "raise SystemExit(3)"], startup_timeout=60)
    t0 = time.monotonic()
    with pytest.raises(NelError, match="exited with status 3"), launched_service("bad", bad, tmp_path / "logs"):
        pass
    assert time.monotonic() - t0 < 30


def test_resource_lifetime_covers_the_run_and_starts_on_demand(tmp_path: Path, stand_in_bin: Path) -> None:
    svc = ServiceConfig(type="vllm", model_path="org/model", startup_timeout=30)
    seen: dict[str, object] = {}

    @dg.asset(required_resource_keys={"used", "unused"})
    def a(context: dg.AssetExecutionContext) -> None:
        seen["url"] = context.resources.used.url
        seen["pid"] = context.resources.used.pid
        assert pid_alive(seen["pid"])  # type: ignore[arg-type]
        seen["unused_pid"] = context.resources.unused.pid

    @dg.asset(deps=[a], required_resource_keys={"used"})
    def b(context: dg.AssetExecutionContext) -> None:
        # same run, same server: not restarted between steps
        assert context.resources.used.pid == seen["pid"]

    res = {"used": LaunchedModelService.from_config("used", svc, tmp_path / "logs"),
           "unused": LaunchedModelService.from_config("unused", svc, tmp_path / "logs")}
    r = dg.materialize([a, b], resources=res, instance=dg.DagsterInstance.ephemeral())
    assert r.success
    assert seen["unused_pid"] is None  # never asked for its URL: never started
    assert not pid_alive(seen["pid"])  # type: ignore[arg-type]

    @dg.asset(required_resource_keys={"used"})
    def boom(context: dg.AssetExecutionContext) -> None:
        seen["pid2"] = context.resources.used.pid if context.resources.used.url else None
        raise RuntimeError("step failed")

    r = dg.materialize([boom], resources={"used": res["used"]}, instance=dg.DagsterInstance.ephemeral(),
                       raise_on_error=False)
    assert not r.success and not pid_alive(seen["pid2"])  # type: ignore[arg-type]


def test_real_llama_cpp_torn_down_on_ctrl_c(tmp_path: Path, data_dir: Path) -> None:
    """SIGINT to a real `nel eval run` process group: the llama.cpp server it launched dies."""
    import importlib.util

    model = llama_model_path()
    if importlib.util.find_spec("llama_cpp") is None or not model.is_file():
        require_real_component("llama_cpp or the tiny model is missing")
    cfg = {
        "services": {"tiny": {"type": "llama_cpp", "model": "stories260K", "model_path": str(model),
                              "extra_args": ["--n_ctx", "512"], "max_tokens": 256, "max_concurrent": 1,
                              "startup_timeout": 120, "env": {"OMP_NUM_THREADS": "1"}}},
        "benchmarks": [{"name": "gsm8k", "max_problems": 200}],
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "nel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "nel.log"
    proc = start_nel("eval", "run", str(path), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)}, log=log)
    server_log = tmp_path / "out" / "logs" / "tiny.log"
    jdir = tmp_path / "out" / "gsm8k" / "_journal"
    pid = None

    def serving() -> bool:  # the server answered and samples flow
        nonlocal pid
        assert proc.poll() is None, "nel exited before samples flowed:\n" + log.read_text()
        pid = pid or _llama_pid(model)
        return bool(pid) and jdir.exists() and any(p.stat().st_size > 0 for p in jdir.rglob("*.jsonl"))

    try:
        wait_for(serving, timeout=PROCESS_START_S, what="the launched llama.cpp server to answer samples",
                 interval=0.2)
        assert pid is not None and pid_alive(pid), log.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc != 0
    wait_for(lambda: not pid_alive(pid), timeout=60, what="the llama.cpp server to exit after Ctrl-C",
             interval=0.1)
    assert server_log.exists() and server_log.stat().st_size > 0  # its log is kept


def _llama_pid(model: Path) -> int | None:
    """PID of a llama_cpp.server serving `model` (ours: the path is unique to this test)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"llama_cpp.server" in cmd and str(model).encode() in cmd and b"--port" in cmd:
            # the tests' own session server has the same model: tell them apart by parent
            try:
                stat_ = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat_[stat_.rfind(")") + 2:].split()[1])
            if _is_nel(ppid):
                return int(entry)
    return None


def _is_nel(pid: int) -> bool:
    try:
        return b"dagster_project.cli.main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
