"""Kubernetes, offline (no API server can run here): every manifest under deploy/k8s and every
one `nel eval run` writes for `cluster.type: k8s` validates in strict mode against the
Kubernetes schemas bundled with `kubernetes-validate`; the pods `dagster-k8s` would create for
a run and for a GPU step (from the Helm values and the step tags) validate too; and the shard
and merge commands the generated Jobs run are executed here, as the pods would, against the
reference server: each pod evaluates exactly its stale shard, the merge sends no request."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate as kv
import pytest
import yaml

from nel_assets.engine.evaluation.sharding import shard_from_env
from nel_resources.launchers.k8s import MERGE_SCRIPT, SHARD_SCRIPT
from nel_resources.launchers.k8s_cluster import kube_api_configured
from tests.support.cli import nel_env, run_nel
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import reset_server_stats, server_stats

K8S = REPO_ROOT / "deploy" / "k8s"
# A Kubernetes release in wide use, and the newest whose schemas the package bundles.
VERSIONS = ("1.30.0", kv.latest_version())
N_PROBLEMS, N_SHARDS = 8, 4


def _validate(doc: dict[str, Any], where: str) -> None:
    for version in VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            raise AssertionError(f"{where} ({doc.get('kind')}) is invalid for Kubernetes {version}: "
                                 f"{str(exc).splitlines()[0]}") from None


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_deploy_manifest_is_valid_in_strict_mode() -> None:
    files = sorted(p for p in K8S.glob("*.yaml") if p.name != "dagster-k8s-tags.yaml")
    kinds = []
    for path in files:
        for doc in _docs(path):
            _validate(doc, path.name)
            kinds.append((path.name, doc["kind"]))
    assert ("eval-job.yaml", "Job") in kinds and ("eval-merge.yaml", "Job") in kinds
    assert ("serve.yaml", "Deployment") in kinds and ("serve.yaml", "Service") in kinds
    (indexed,) = _docs(K8S / "eval-indexed-job.yaml")
    assert indexed["spec"]["completionMode"] == "Indexed"
    env = {e["name"]: e.get("value") for e in indexed["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NEL_TOTAL_SHARDS"] == str(indexed["spec"]["completions"])
    # the index Kubernetes sets in each pod is the shard nel runs
    assert shard_from_env({"JOB_COMPLETION_INDEX": "5", "NEL_TOTAL_SHARDS": env["NEL_TOTAL_SHARDS"]}) == (5, 8)
    deploy, service = _docs(K8S / "serve.yaml")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health" == c["livenessProbe"]["httpGet"]["path"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]


def test_a_broken_manifest_is_caught() -> None:
    """The check can fail: an unknown field and a wrong type are both refused."""
    (job,) = _docs(K8S / "eval-job.yaml")
    job["spec"]["completionsMode"] = "Indexed"  # a typo of completionMode
    with pytest.raises(AssertionError, match="completionsMode"):
        _validate(job, "typo")
    (job,) = _docs(K8S / "eval-job.yaml")
    job["spec"]["backoffLimit"] = "two"
    with pytest.raises(AssertionError, match="invalid"):
        _validate(job, "type")


def _pod_dict(job: Any) -> dict[str, Any]:
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(job)


def test_dagster_k8s_pods_for_a_run_and_a_gpu_step() -> None:
    """The Job objects dagster-k8s builds (its own construct_dagster_k8s_job, as its run
    launcher and step executor call it) from the Helm values and the step tags."""
    from dagster_k8s.job import (
        DagsterK8sJobConfig,
        UserDefinedDagsterK8sConfig,
        construct_dagster_k8s_job,
        get_job_name_from_run_id,
        get_user_defined_k8s_config,
    )

    values = yaml.safe_load((K8S / "helm" / "values.yaml").read_text())
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    job_config = DagsterK8sJobConfig(
        job_image="nel:latest", dagster_home="/opt/dagster/dagster_home",
        image_pull_policy=launcher["imagePullPolicy"], instance_config_map="dagster-instance",
        env_secrets=[s["name"] for s in launcher["envSecrets"]],
        volumes=launcher["volumes"], volume_mounts=launcher["volumeMounts"])
    run_cfg = UserDefinedDagsterK8sConfig(
        container_config=launcher["runK8sConfig"]["containerConfig"])
    args = ["dagster", "api", "execute_run", "{}"]
    run_job = _pod_dict(construct_dagster_k8s_job(
        job_config, args, get_job_name_from_run_id("0123abcd"), user_defined_k8s_config=run_cfg,
        component="run_worker", labels={"dagster/job": "evaluate"}))
    _validate(run_job, "run worker Job")
    (c,) = run_job["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert {"secretRef": {"name": "nel-secrets"}} in c["envFrom"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in run_job["spec"]["template"]["spec"]["volumes"]
              if v.get("persistentVolumeClaim")]
    assert claims == ["nel-results"]

    steps = yaml.safe_load((K8S / "dagster-k8s-tags.yaml").read_text())
    for step, tags in steps.items():
        # as a user writes them in op_tags: the config tag is a JSON string
        tag_strings = {k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in tags.items()}
        user_cfg = get_user_defined_k8s_config(tag_strings)
        step_job = _pod_dict(construct_dagster_k8s_job(
            job_config, ["dagster", "api", "execute_step", "{}"], f"dagster-step-{step.replace('_', '-')}",
            user_defined_k8s_config=user_cfg, component="step_worker"))
        _validate(step_job, f"{step} Job")
        pod = step_job["spec"]["template"]["spec"]
        gpu = pod["containers"][0]["resources"]["requests"].get("nvidia.com/gpu")
        if step == "shard_step":
            assert gpu == "1" and pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
            assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        else:
            assert gpu is None


@pytest.fixture
def k8s_run(tmp_path: Path, reference_server, data_dir: Path) -> dict[str, Any]:
    """A local run of all 4 shards, then two of them lost: shards 1 and 3 are stale."""
    url = reference_server()
    out = tmp_path / "results"
    cfg: dict[str, Any] = {
        "services": {"m": {"type": "api", "url": url, "model": "m", "temperature": 0.0, "max_tokens": 16}},
        "benchmarks": [{"name": "gsm8k", "max_problems": N_PROBLEMS, "shards": N_SHARDS}],
        "output": {"dir": str(out)},
    }
    env = {"NEL_DATA_DIR": str(data_dir)}
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump(cfg))
    p = run_nel("eval", "run", str(local), "--no-progress", env=env)
    # no kubeconfig anywhere (nor ~/.kube/config): the default submission has no API server
    env.update({"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")})
    assert p.returncode == 0, p.stderr
    for shard in (1, 3):
        for f in (out / "gsm8k" / "shard_results").glob(f"model=m/shard={shard}/*"):
            f.unlink()
    cfg["cluster"] = {"type": "k8s", "k8s": {"image": "registry.local/nel:1", "gpus": 1, "parallelism": 1}}
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return {"cfg": path, "env": env, "url": url, "out": out, "tmp": tmp_path}


@pytest.mark.slow
def test_eval_run_k8s_writes_jobs_for_the_stale_shards_only(k8s_run: dict[str, Any]) -> None:
    s = k8s_run
    # the default is to submit, and no API server is configured: refused, one line, nothing written
    assert kube_api_configured({"KUBECONFIG": str(s["tmp"] / "none"), "HOME": str(s["tmp"])}) is None
    p = run_nel("eval", "run", str(s["cfg"]), "--no-progress", env=s["env"])
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().startswith("error: cluster.type k8s: no Kubernetes API server is configured")
    assert len(p.stderr.strip().splitlines()) == 1 and not (s["out"] / "k8s").exists()

    p = run_nel("eval", "run", str(s["cfg"]), "--no-progress", "--no-submit", env=s["env"])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("2 stale shard(s) in 1 Indexed Job(s)")
    shards_file = Path(lines[1].removeprefix("kubectl apply -f "))
    assert lines[1].startswith("kubectl apply -f ") and shards_file.is_file()
    assert lines[3] == f"kubectl apply -f {shards_file.parent / 'merge.yaml'}"
    docs = _docs(shards_file) + _docs(shards_file.parent / "merge.yaml")
    for d in docs:
        _validate(d, d["metadata"]["name"])
    cm, job, merge = docs
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job", "Job"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 2 and job["spec"]["parallelism"] == 1
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "registry.local/nel:1"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NEL_SHARDS"] == "1 3" and env["NEL_TOTAL_SHARDS"] == str(N_SHARDS)
    pod_cfg = yaml.safe_load(cm["data"]["gsm8k.yaml"])
    assert pod_cfg["cluster"] == {"type": "local"} and pod_cfg["output"]["dir"] == "/results"
    from nel_resources.launchers.registry import get_launcher

    assert [(st.model, st.shard, st.state) for st in get_launcher("k8s").states(s["out"])] == [
        ("m", 1, "WRITTEN"), ("m", 3, "WRITTEN")]

    # Run the pods' own commands here, as Kubernetes would (its env, the ConfigMap's files).
    conf = s["tmp"] / "etc-nel"
    conf.mkdir()
    for name, text in cm["data"].items():
        (conf / name).write_text(text)
    venv_bin = str(Path(os.sys.executable).parent)
    pod_env = {k: v for k, v in env.items() if v is not None}  # secretKeyRef ones are unset here
    base_env = nel_env({**s["env"], **pod_env, "NEL_CONFIG_DIR": str(conf), "NEL_RESULTS_DIR": str(s["out"]),
                        "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"})
    asked: dict[int, int] = {}
    for index in range(job["spec"]["completions"]):
        reset_server_stats(s["url"])
        r = subprocess.run(["/bin/sh", "-c", SHARD_SCRIPT], env={**base_env, "JOB_COMPLETION_INDEX": str(index)},
                           capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
        assert r.returncode == 0, r.stderr
        asked[index] = server_stats(s["url"])["models"].get("m", 0)
    assert asked == {0: N_PROBLEMS // N_SHARDS, 1: N_PROBLEMS // N_SHARDS}  # one shard each
    stored = sorted(p.name for p in (s["out"] / "gsm8k" / "shard_results" / "model=m").iterdir()
                    if any(p.glob("*.parquet")))
    assert stored == [f"shard={i}" for i in range(N_SHARDS)]
    reset_server_stats(s["url"])
    (mc,) = merge["spec"]["template"]["spec"]["containers"]
    r = subprocess.run(["/bin/sh", "-c", MERGE_SCRIPT], env=base_env, capture_output=True, text=True,
                       timeout=300, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert mc["command"][-1] == MERGE_SCRIPT
    assert server_stats(s["url"])["models"].get("m", 0) == 0
    assert (s["out"] / "gsm8k" / "bundle" / "model=m").is_dir()

    # Nothing stale any more: the next submission has no Indexed Job, only the merge. With a
    # kubeconfig it submits; an API server that does not answer is one line, manifests kept.
    kubeconfig = s["tmp"] / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "here", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "here", "context": {"cluster": "here", "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "t"}}]}))
    p = run_nel("eval", "run", str(s["cfg"]), "--no-progress", env={**s["env"], "KUBECONFIG": str(kubeconfig)})
    assert p.returncode != 0 and p.stdout.startswith("0 stale shard(s) in 0 Indexed Job(s)"), p.stdout
    err = p.stderr.strip()
    assert err.startswith("error: submitting to Kubernetes failed") and len(err.splitlines()) == 1, err
    assert "Traceback" not in p.stderr
    assert len(list((s["out"] / "k8s").glob("*/merge.yaml"))) >= 1  # kept, to apply later
