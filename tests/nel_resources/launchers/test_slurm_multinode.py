"""The step and per-node scripts of multi-node servers (nel_resources.launchers.slurm_multinode),
the `--nodes` their jobs ask for, and which configs are refused where (fast: no SLURM)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nel_resources.checks.supported import check_supported
from nel_resources.config import ConfigError, NelConfig, ServiceConfig
from nel_resources.launchers import slurm_multinode as mn
from nel_resources.services.launch import service_command

RDV = mn.Rendezvous("10.0.0.7", 41234)


def svc(typ: str, **kw: Any) -> ServiceConfig:
    return ServiceConfig(type=typ, model_path="org/model", model="served", num_nodes=2, **kw)


def script(typ: str, **kw: Any) -> str:
    s = svc(typ, **kw)
    return mn.rank_script("model", s, service_command("model", s, 8000), RDV)


def test_a_multi_node_server_outside_a_slurm_job_is_refused_not_run_on_one_node(tmp_path: Path) -> None:
    from benchmarks.errors import NelError
    from nel_resources.services.launch import make_server

    with pytest.raises(NelError, match="runs only in the SLURM jobs"):
        make_server("model", svc("vllm"), tmp_path)
    with pytest.raises(NelError, match="num_nodes 2 runs in a SLURM job"):
        mn.check_in_job("model", svc("vllm"), {})
    with pytest.raises(NelError, match="this job has 1 node"):
        mn.check_in_job("model", svc("vllm"), {"SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "1"})


def test_vllm_forms_a_ray_cluster_then_serves_on_the_head_with_the_ray_backend(tmp_path: Path) -> None:
    text = script("vllm", tensor_parallel_size=4, pipeline_parallel_size=2)
    assert "ray start --head --port=41234" in text
    assert "ray start --address=10.0.0.7:41234" in text and "--block" in text
    # the head waits until `ray status` lists every node, then starts vLLM on Ray
    assert "ray status --address=10.0.0.7:41234" in text and '"$joined" -ge 2' in text
    assert ("vllm serve org/model --host 127.0.0.1 --port 8000 --tensor-parallel-size 4 "
            "--pipeline-parallel-size 2 --served-model-name served --distributed-executor-backend ray") in text
    assert "export RAY_ADDRESS=10.0.0.7:41234" in text
    _bash_syntax_ok(tmp_path, text)


def test_sglang_runs_the_same_command_on_every_node_with_its_rank(tmp_path: Path) -> None:
    text = script("sglang", tensor_parallel_size=8)
    assert ('--tp-size 8 --served-model-name served --nnodes 2 --node-rank "$rank" '
            "--dist-init-addr 10.0.0.7:41234") in text
    assert 'rank="${SLURM_NODEID:-0}"' in text
    _bash_syntax_ok(tmp_path, text)


def test_trtllm_is_one_mpi_world_one_rank_per_gpu(tmp_path: Path) -> None:
    s = svc("trt_llm", tensor_parallel_size=8)
    text = mn.rank_script("model", s, service_command("model", s, 8000), RDV)
    assert "exec trtllm-llmapi-launch trtllm-serve org/model" in text and "--tp_size 8" in text
    argv = mn.step_argv(s, tmp_path / "r.sh", tmp_path / "model.slurm-5.log")
    assert argv[:7] == ["srun", "--overlap", "--mpi=pmix", "--nodes=2", "--ntasks=8",
                        "--ntasks-per-node=4", "--kill-on-bad-exit=1"]
    assert f"--output={tmp_path}/model.slurm-5.node%n.log" in argv
    _bash_syntax_ok(tmp_path, text)


def test_the_step_runs_one_task_per_node_with_a_log_per_node(tmp_path: Path) -> None:
    s = svc("vllm")
    argv = mn.step_argv(s, tmp_path / "r.sh", tmp_path / "model.slurm-5_1.log", ["--container-image=img"])
    assert argv == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                    "--kill-on-bad-exit=1", f"--output={tmp_path}/model.slurm-5_1.node%n.log",
                    "--container-image=img", "bash", str(tmp_path / "r.sh")]
    assert mn.node_logs(tmp_path / "model.slurm-5_1.log", 2) == [
        tmp_path / "model.slurm-5_1.node0.log", tmp_path / "model.slurm-5_1.node1.log"]


def _bash_syntax_ok(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ranks.sh"
    path.write_text(text)
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _cfg(cluster: dict[str, Any], **service: Any) -> NelConfig:
    return NelConfig.model_validate({
        "services": {"model": {"type": "vllm", "model_path": "org/m", "num_nodes": 2, **service}},
        "benchmarks": [{"name": "gsm8k", "solver": {"type": "simple", "service": "model"}}],
        "cluster": cluster})


SLURM = {"type": "slurm", "node_pools": {"gpu": {"partition": "multi", "nodes": 1, "gres": "gpu:4"}}}


def test_the_job_asks_for_the_nodes_of_its_multi_node_server() -> None:
    cfg = _cfg(SLURM, node_pool="gpu", tensor_parallel_size=8, ray_binary="/opt/ray/bin/ray")
    check_supported(cfg)  # ray_binary too: the `ray` a multi-node vLLM server starts
    assert mn.job_nodes(cfg, "gpu") == 2
    from nel_resources.launchers.slurm_scripts import header_for

    assert header_for(cfg, "nel-eval", "x.log", servers=True).nodes == 2
    assert header_for(cfg, "nel-merge", "x.log").nodes == 1  # the merge job starts no server


@pytest.mark.parametrize(("cluster", "why"), [
    ({"type": "docker"}, "one Docker engine on one host"),
    ({"type": "k8s", "namespace": "nel"}, "LeaderWorkerSet"),
    ({"type": "local"}, "this one machine"),
])
def test_num_nodes_is_refused_in_one_line_where_one_host_runs_the_server(
        cluster: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_supported(_cfg(cluster))
    msg = str(e.value)
    assert "key services.model.num_nodes" in msg and why in msg and "\n" not in msg, msg


@pytest.mark.parametrize(("service", "why"), [
    ({"type": "llama_cpp", "model_path": "/x.gguf"}, "a llama_cpp server runs on one node"),
    ({"type": "trt_llm", "tensor_parallel_size": 3}, "must be a multiple of num_nodes"),
    ({"command": ["my-server", "--port", "{port}"]}, "custom `command`"),
])
def test_num_nodes_is_refused_where_the_server_has_no_multi_node_form(
        service: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        check_supported(_cfg(SLURM, node_pool="gpu", **service))


def test_a_multi_node_server_on_its_own_heterogeneous_component_is_refused() -> None:
    cfg = NelConfig.model_validate({
        "services": {"model": {"type": "vllm", "model_path": "org/m", "num_nodes": 2, "node_pool": "gpu"},
                     "judge": {"type": "vllm", "model_path": "org/j", "node_pool": "cpu"}},
        "benchmarks": [{"name": "gsm8k", "solver": {"type": "simple", "service": "model"}}],
        "cluster": {"type": "slurm", "node_pools": {"cpu": {"partition": "debug"},
                                                    "gpu": {"partition": "het"}}}})
    with pytest.raises(ConfigError, match=r"heterogeneous-job component \(node pool gpu\)"):
        check_supported(cfg)


def test_the_job_script_shows_the_step_and_the_per_node_script(tmp_path: Path) -> None:
    from nel_resources.launchers.slurm_scripts import write_scripts

    cfg = _cfg({**SLURM, "container_mounts": ["/data:/data"]}, node_pool="gpu", tensor_parallel_size=8,
               image="vllm/vllm-openai:v0.8")
    eval_script, _ = write_scripts(cfg, tmp_path, ["eval", "run", "c.yaml"])
    text = eval_script.read_text()
    assert "#SBATCH --nodes=2" in text
    assert "# nel launches services.model (vllm) over 2 nodes of the job, its head on this node:" in text
    step = next(ln for ln in text.splitlines() if "srun --overlap --nodes=2" in ln)
    assert "--container-image=vllm/vllm-openai:v0.8" in step and "/data:/data" in step, step
    assert shlex.split(step.lstrip("# "))[-2] == "bash"
    assert "ray start --head '--port=<port>'" in text and "model.slurm-<job>.ranks.sh:" in text
    assert "--distributed-executor-backend ray" in text
