"""Launched model servers on Kubernetes, offline: `nel eval run` with `cluster.type: k8s` and
a vLLM / SGLang service writes a Deployment and a Service per server (GPU requests, the
server's real command line, startup and readiness probes on its health endpoint, a memory
/dev/shm) that validate in strict mode; each shard pod waits for the server in an init
container (whose script is run here against real servers) and calls it as an `api`
service at the Service's DNS name (the pod's config is run here against the reference
server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nel_resources.launchers.k8s_servers import WAIT_SCRIPT
from nel_resources.runtime.processes import free_port
from tests.nel_resources.launchers.test_k8s import _docs, _validate
from tests.support.cli import run_nel
from tests.support.reference import server_stats


def write(tmp: Path, typ: str) -> Path:
    cfg: dict[str, Any] = {
        "services": {"model": {"type": typ, "model": "meta/llama-3.1-8b-instruct",
                               "served_model_name": "llama", "tensor_parallel_size": 2,
                               "pipeline_parallel_size": 2, "startup_timeout": 900,
                               "extra_env": {"VLLM_LOGGING_LEVEL": "INFO"}}},
        "benchmarks": [{"name": "gsm8k", "max_problems": 4, "shards": 2,
                        "solver": {"type": "simple", "service": "model"}}],
        "cluster": {"type": "k8s", "k8s": {"image": "registry.local/nel:1", "namespace": "evals",
                                           "shm_size": "16Gi"}},
        "output": {"dir": str(tmp / "out")},
    }
    path = tmp / "k8s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("typ", ["vllm", "sglang"])
def test_a_launched_server_is_a_deployment_and_a_service_the_shard_pods_wait_for(
        typ: str, tmp_path: Path, data_dir: Path) -> None:
    p = run_nel("eval", "run", str(write(tmp_path, typ)), "--no-progress", "--no-submit",
                env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    where = Path(lines[0].rsplit("manifests in ", 1)[1])
    # The server first, the shards, then the server removed before the merge.
    assert [line.split()[1] + " " + Path(line.split()[-1]).name for line in lines[1:] if
            line.startswith("kubectl") and " -f " in line] == [
        "apply servers.yaml", "apply shards.yaml", "delete servers.yaml", "apply merge.yaml"]
    servers, shards = _docs(where / "servers.yaml"), _docs(where / "shards.yaml")
    for d in servers + shards + _docs(where / "merge.yaml"):
        _validate(d, d["metadata"]["name"])
    deploy, service = servers
    assert (deploy["kind"], service["kind"]) == ("Deployment", "Service")
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    argv = c["command"] + c["args"]
    if typ == "vllm":
        assert c["image"] == "vllm/vllm-openai:latest"
        assert argv[:3] == ["vllm", "serve", "meta/llama-3.1-8b-instruct"]
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
        assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    else:
        assert c["image"] == "lmsysorg/sglang:latest"
        assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
        assert argv[argv.index("--tp-size") + 1] == "2" and argv[argv.index("--pp-size") + 1] == "2"
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"
    assert argv[argv.index("--served-model-name") + 1] == "llama"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"  # tensor x pipeline parallel
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 900
    assert c["env"] == [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]
    assert pod["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    host = f"{service['metadata']['name']}.evals.svc.cluster.local:8000"

    cm, job = shards
    (wait,) = job["spec"]["template"]["spec"]["initContainers"]
    assert wait["command"][:3] == ["python3", "-c", WAIT_SCRIPT]
    assert wait["command"][3:] == [f"http://{host}/health", "900"]
    pod_cfg = yaml.safe_load(cm["data"]["gsm8k.yaml"])
    assert pod_cfg["services"]["model"] == {
        "type": "api", "model": "llama", "url": f"http://{host}/v1/chat/completions"}


def test_the_wait_script_waits_for_a_server_and_gives_up_on_a_silent_one(reference_server) -> None:
    url = reference_server()
    base = url.split("/v1")[0]
    ok = subprocess.run([sys.executable, "-c", WAIT_SCRIPT, f"{base}/v1/models", "30"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    silent = f"http://127.0.0.1:{free_port()}/health"
    bad = subprocess.run([sys.executable, "-c", WAIT_SCRIPT, silent, "1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and f"{silent} not ready" in bad.stderr


def test_the_pods_config_calls_the_server_as_an_api_service(tmp_path: Path, data_dir: Path,
                                                            reference_server) -> None:
    p = run_nel("eval", "run", str(write(tmp_path, "vllm")), "--no-progress", "--no-submit",
                env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == 0, p.stderr
    where = Path(p.stdout.splitlines()[0].rsplit("manifests in ", 1)[1])
    pod_cfg = yaml.safe_load(_docs(where / "shards.yaml")[0]["data"]["gsm8k.yaml"])
    # The cluster DNS name stands for the reference server here.
    url = reference_server()
    pod_cfg["services"]["model"]["url"] = url
    pod_cfg["output"]["dir"] = str(tmp_path / "pod-results")
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod_cfg))
    r = run_nel("eval", "run", str(path), "--no-progress", env={"NEL_DATA_DIR": str(data_dir)})
    assert r.returncode == 0, r.stderr
    assert server_stats(url)["models"].get("llama") == 4  # the served name, one request per item
