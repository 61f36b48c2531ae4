"""Task images built by CodeBuild into ECR for the `ecs_fargate` sandbox (ecr_build), against
moto's server (a real process on 127.0.0.1): the build context uploaded to S3, the CodeBuild
project and its buildspec, the build polled to its end, the task definition naming the built
image, run-task, and the ECR lookup that skips a rebuild of an unchanged task.

What moto cannot do: run the build (its builds succeed without running the buildspec, so
nothing is pushed: the test pushes the manifest itself, as the buildspec's `docker push`
would), run the task's containers or the SSH tunnel to them (`connect` is not exercised).
The tags and the buildspec are compared with NeMo Evaluator 0.3.0's own functions.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3", reason="the ecs_fargate sandbox needs boto3 (nel[test])")
import boto3

from benchmarks.agentic.harbor_tasks import HarborTaskSet
from nel_assets.engine.evaluation.sandboxing import spec_for
from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes.base import SandboxError, SandboxSpec
from nel_resources.sandboxes.ecr_build import BuildSettings, buildspec, task_image_tag
from nel_resources.sandboxes.ecs_fargate import EcsFargateSandboxFactory, refusal
from tests.support.harbor_tasks import write_task_set
from tests.support.moto_server import REGION
from tests.support.peers import peer_nemo_bin

ACCOUNT = "123456789012"
REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/harbor-tasks"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/nel-codebuild"


@pytest.fixture(scope="module")
def aws(moto_endpoint: str) -> dict[str, Any]:
    """The ECS side (cluster, subnet, SSH key secrets) and the build side (an ECR
    repository and the S3 bucket for build contexts), in moto."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    boto3.client("ecs", region_name=REGION).create_cluster(clusterName="harbor")
    sm = boto3.client("secretsmanager", region_name=REGION)
    pub = sm.create_secret(Name="h/pub", SecretString="ssh-ed25519 AAAAtest nel")["ARN"]
    priv = sm.create_secret(Name="h/priv", SecretString="-----BEGIN OPENSSH PRIVATE KEY-----\n")["ARN"]
    boto3.client("ecr", region_name=REGION).create_repository(repositoryName="harbor-tasks")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="nel-builds")
    return {"subnet": subnet, "pub": pub, "priv": priv}


def _block(aws: dict[str, Any], **extra: Any) -> SandboxConfig:
    return SandboxConfig(**{
        "type": "ecs_fargate", "region": REGION, "cluster": "harbor", "subnets": [aws["subnet"]],
        "assign_public_ip": False, "execution_role_arn": f"arn:aws:iam::{ACCOUNT}:role/exec",
        "ssh_sidecar": {"public_key_secret_arn": aws["pub"], "private_key_secret_arn": aws["priv"]},
        "ecr_repository": REPO, "s3_bucket": "nel-builds", "codebuild_service_role": ROLE,
        "codebuild_compute_type": "BUILD_GENERAL1_SMALL", **extra})


def _task(root: Path) -> tuple[HarborTaskSet, Path]:
    """A Harbor task whose Dockerfile has build steps (RUN, COPY) and no prebuilt image."""
    write_task_set(root, {"a-greet": {"instruction": "greet", "file": "g.txt", "expected": "hi\n"}},
                   "python:3.12-slim", agent_timeout=60)
    toml = root / "a-greet" / "task.toml"
    toml.write_text(toml.read_text().replace('docker_image = "python:3.12-slim"\n', ""))
    env = root / "a-greet" / "environment"
    (env / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\nCOPY req.txt /app/\n"
                                    "RUN pip install -r /app/req.txt\n")
    (env / "req.txt").write_text("attrs\n")
    return HarborTaskSet(root, label="t"), env


def _launch(factory: EcsFargateSandboxFactory, spec: SandboxSpec) -> Any:
    sb = factory.create(spec)
    asyncio.run(sb.launch())
    return sb


def test_a_task_image_is_built_by_codebuild_then_run_and_not_rebuilt(
        aws: dict[str, Any], tmp_path: Path) -> None:
    env, env_dir = _task(tmp_path / "tasks")
    spec = spec_for(asyncio.run(env.seed(0)))
    assert spec.environment_dir == str(env_dir)  # the seed hands its build context on
    tag = task_image_tag(env_dir)
    assert tag.startswith("nel-harbor-tasks-a-greet-")  # 0.3.0's name: dataset, task, hash
    ecs, ecr = boto3.client("ecs", region_name=REGION), boto3.client("ecr", region_name=REGION)
    s3, cb = boto3.client("s3", region_name=REGION), boto3.client("codebuild", region_name=REGION)

    factory = EcsFargateSandboxFactory(_block(aws), poll_s=0.05)
    assert factory.control.builder is not None
    factory.control.builder._poll_s = 0.05
    sb = _launch(factory, spec)
    # the build context, zipped, in S3 under 0.3.0's key
    (obj,) = s3.list_objects_v2(Bucket="nel-builds", Prefix="ecs-sandbox/codebuild/a-greet-")["Contents"]
    body = s3.get_object(Bucket="nel-builds", Key=obj["Key"])["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert sorted(zf.namelist()) == ["Dockerfile", "req.txt"]
        assert zf.read("Dockerfile") == (env_dir / "Dockerfile").read_bytes()
    nonce = obj["Key"].removeprefix("ecs-sandbox/codebuild/a-greet-").removesuffix(".zip")
    # the CodeBuild project: privileged (it runs docker), the role, the buildspec
    (project,) = cb.batch_get_projects(names=[f"ecs-sandbox-build-{nonce}"])["projects"]
    assert project["source"]["location"] == f"nel-builds/{obj['Key']}"
    assert project["serviceRole"] == ROLE
    assert project["environment"]["privilegedMode"] is True
    assert project["environment"]["computeType"] == "BUILD_GENERAL1_SMALL"
    spec_text = project["source"]["buildspec"]
    assert f"docker build -t harbor-tasks:{tag} ." in spec_text
    assert f"docker push {REPO}:{tag}" in spec_text
    assert f"docker login --username AWS --password-stdin {REPO.split('/')[0]}" in spec_text
    (build_id,) = cb.list_builds_for_project(projectName=f"ecs-sandbox-build-{nonce}")["ids"]
    assert cb.batch_get_builds(ids=[build_id])["builds"][0]["buildStatus"] == "SUCCEEDED"
    assert factory.control.builder.built == {tag: build_id}
    # the task definition runs the built image, and the task runs
    (task,) = ecs.describe_tasks(cluster="harbor", tasks=[sb.task_arn])["tasks"]
    assert task["lastStatus"] == "RUNNING"
    td = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
    assert td["containerDefinitions"][0]["image"] == f"{REPO}:{tag}"
    asyncio.run(sb.stop())
    asyncio.run(factory.aclose())

    # CodeBuild's `docker push` (moto runs no build): the tag is now in the repository
    ecr.put_image(repositoryName="harbor-tasks", imageTag=tag, imageManifest=json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
         "config": {"digest": "sha256:" + "1" * 64, "size": 1, "mediaType":
                    "application/vnd.docker.container.image.v1+json"}, "layers": []}))
    again = EcsFargateSandboxFactory(_block(aws), poll_s=0.05)  # a new run: nothing cached
    sb = _launch(again, spec)
    assert again.control.builder is not None and again.control.builder.built == {}
    assert len(cb.list_projects()["projects"]) == 1  # no second project, no second build
    (task,) = ecs.describe_tasks(cluster="harbor", tasks=[sb.task_arn])["tasks"]
    td = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
    assert td["containerDefinitions"][0]["image"] == f"{REPO}:{tag}"
    asyncio.run(sb.stop())
    # a changed build context is a new tag: built again
    (env_dir / "req.txt").write_text("attrs\nidna\n")
    assert task_image_tag(env_dir) != tag
    again.control.builder._poll_s = 0.05
    sb = _launch(again, spec)
    assert list(again.control.builder.built) == [task_image_tag(env_dir)]
    assert len(cb.list_projects()["projects"]) == 2
    asyncio.run(sb.stop())
    asyncio.run(again.aclose())


def test_bad_build_input_is_one_line(aws: dict[str, Any], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, env_dir = _task(tmp_path / "tasks")
    spec = SandboxSpec(image="python:3.12-slim", environment_dir=str(env_dir))
    # a repository that does not exist: one line, before any upload
    missing = EcsFargateSandboxFactory(_block(aws, ecr_repository=f"{REPO}-nope"))
    with pytest.raises(SandboxError) as err:
        _launch(missing, spec)
    assert str(err.value) == (f"ecs_fargate sandbox: ECR repository 'harbor-tasks-nope' does not "
                              f"exist in {REGION}: create it (aws ecr create-repository "
                              "--repository-name harbor-tasks-nope) or fix `ecr_repository`")
    # nothing to build with: refused before any request, on the key
    no_bucket = refusal(_block(aws, s3_bucket=None))
    assert no_bucket is not None and no_bucket.key == "ecr_repository"
    assert no_bucket.why == ("building task images into `ecr_repository` needs `s3_bucket` (the "
                             "build context is uploaded there)")
    no_role = refusal(_block(aws, codebuild_service_role=None))
    assert no_role is not None and "`codebuild_project`, or `codebuild_service_role`" in no_role.why
    # no region anywhere (a bare repository name, no `region`, no AWS_DEFAULT_REGION)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(SandboxError, match=r"^ecs_fargate sandbox: building task images needs a "
                                           r"region: set the block's `region`"):
        BuildSettings.of(_block(aws, region=None), region=None, s3_bucket="b",
                         ecr_repository="harbor-tasks", codebuild_service_role=ROLE,
                         dockerhub_secret_arn=None)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)  # boto3's own region counts
    assert BuildSettings.of(_block(aws, region=None), region=None, s3_bucket="b",
                            ecr_repository="harbor-tasks", codebuild_service_role=ROLE,
                            dockerhub_secret_arn=None).region == REGION  # type: ignore[union-attr]
    # a task that must be built, in a block that cannot build: one line naming what to set
    plain = EcsFargateSandboxFactory(_block(aws, ecr_repository=None, s3_bucket=None))
    with pytest.raises(SandboxError, match=r"^task a-greet: its environment/Dockerfile must be "
                                           r"built and the ecs_fargate block has no `ecr_repository`"):
        _launch(plain, spec)


def test_tags_and_buildspec_are_nemo_evaluators(tmp_path: Path) -> None:
    """A Harbor task's build context gets the same ECR tag and buildspec from NeMo Evaluator
    0.3.0's own functions (its Harbor environment's image name, `ImageBuilder`'s tag and
    buildspec; run in its own venv): the two tools share one ECR cache."""
    _, env_dir = _task(tmp_path / "terminal-bench@2.0")
    s = BuildSettings(ecr_repository=REPO, region=REGION, s3_bucket="b", codebuild_service_role=ROLE)
    ours = {"tag": task_image_tag(env_dir)}
    ours["buildspec"] = buildspec(s, ours["tag"])
    script = (
        "import json, sys\nfrom pathlib import Path\n"
        "from nemo_evaluator.sandbox.ecs_fargate import EcsFargateConfig, ImageBuilder, _sanitize_id\n"
        "from nemo_evaluator.environments.harbor import _built_image_tag\n"
        "env = Path(sys.argv[1])\n"
        "name = _sanitize_id(_built_image_tag(env.parent.parent.name, env.parent.name, env))\n"
        "tag = ImageBuilder.get_ecr_image_tag(env, name)\n"
        f"cfg = EcsFargateConfig(region={REGION!r}, ecr_repository={REPO!r})\n"
        "print(json.dumps({'tag': tag, 'buildspec': ImageBuilder._generate_buildspec("
        "cfg, 'harbor-tasks', tag, cfg.ecr_repository + ':' + tag)}))\n")
    proc = subprocess.run([str(peer_nemo_bin().parent / "python"), "-c", script, str(env_dir)],
                          capture_output=True, text=True, timeout=120, start_new_session=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ours
    assert ours["tag"].startswith("nel-harbor-terminal-bench-2-0-a-greet-")
