"""The `ecs_fargate` sandbox: its AWS calls against moto's server (a real process on
127.0.0.1), its exec server as a real local process, its refusals before any request.

What cannot run here: a Fargate task's containers and the SSH tunnel to them (moto runs no
containers), so `connect` is not exercised; `ssh_argv` is checked as a command line."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3", reason="the ecs_fargate sandbox needs boto3 (nel[test])")
import boto3

from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.runtime.processes import ManagedProcess
from nel_resources.sandboxes import exec_server
from nel_resources.sandboxes.base import SandboxError, SandboxSpec
from nel_resources.sandboxes.ecs_fargate import (
    EcsFargateSandboxFactory,
    EcsSettings,
    ExecClient,
    has_aws_credentials,
    refusal,
    ssh_argv,
    task_definition,
)
from tests.support.moto_server import REGION, port_from_log
from tests.support.waiting import wait_for

ECS_CONFIG = """\
services:
  model: {{type: api, url: "http://127.0.0.1:9/v1/chat/completions", model: m}}
benchmarks:
  - name: gsm8k
    sandbox: box
sandboxes:
  box:
    type: ecs_fargate
    image: python:3.12-slim
    region: us-east-1
    cluster: nel-sandboxes
    subnets: [{subnet}]
    execution_role_arn: arn:aws:iam::123456789012:role/nel-exec
    ssh_sidecar:
      public_key_secret_arn: {pub}
      private_key_secret_arn: {priv}
    cpu: "1024"
    memory: "2048"
"""


@pytest.fixture(scope="module")
def aws(moto_endpoint: str) -> dict[str, Any]:
    """A VPC, subnet, security group, ECS cluster and the SSH key secrets, in moto."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    # (as Fargate VPCs usually are; moto's run-task also needs it to name the interface)
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.7.1.0/24")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="nel-sb", Description="sandbox",
                                   VpcId=vpc)["GroupId"]
    boto3.client("ecs", region_name=REGION).create_cluster(clusterName="nel-sandboxes")
    sm = boto3.client("secretsmanager", region_name=REGION)
    pub = sm.create_secret(Name="nel/ssh-pub", SecretString="ssh-ed25519 AAAAtest nel")["ARN"]
    priv = sm.create_secret(Name="nel/ssh-priv",
                            SecretString="-----BEGIN OPENSSH PRIVATE KEY-----\nx\n")["ARN"]
    return {"subnet": subnet, "sg": sg, "pub": pub, "priv": priv}


def _config(aws: dict[str, Any], **extra: Any) -> SandboxConfig:
    return SandboxConfig(**{
        "type": "ecs_fargate", "image": "python:3.12-slim", "region": REGION,
        "cluster": "nel-sandboxes", "subnets": [aws["subnet"]], "security_groups": [aws["sg"]],
        "assign_public_ip": False, "cpu": "1024", "memory": "2048", "ephemeral_storage_gib": 30,
        "execution_role_arn": "arn:aws:iam::123456789012:role/nel-exec",
        "task_role_arn": "arn:aws:iam::123456789012:role/nel-task", "log_group": "/nel/sandboxes",
        "log_stream_prefix": "hx", "max_task_lifetime_sec": 900,
        "container_env": {"FROM_CONFIG": "c"},
        "ssh_sidecar": {"public_key_secret_arn": aws["pub"],
                        "private_key_secret_arn": aws["priv"], "sshd_port": 2022}, **extra})


def test_launch_registers_runs_polls_and_teardown_stops_the_task(
        aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_TEST_SECRET_KEY", "sk-must-not-reach-aws")
    ecs = boto3.client("ecs", region_name=REGION)
    factory = EcsFargateSandboxFactory(_config(aws), poll_s=0.05)
    spec = SandboxSpec(env={"FROM_SPEC": "s"}, files={"a.py": "print(1)"})
    first, second = factory.create(spec), factory.create(spec)

    async def go() -> None:
        await first.launch()
        await second.launch()
        tasks = ecs.describe_tasks(cluster="nel-sandboxes",
                                   tasks=[first.task_arn, second.task_arn])["tasks"]
        assert [t["lastStatus"] for t in tasks] == ["RUNNING", "RUNNING"]
        # one task definition for both sandboxes of the same image
        assert tasks[0]["taskDefinitionArn"] == tasks[1]["taskDefinitionArn"]
        td = ecs.describe_task_definition(taskDefinition=tasks[0]["taskDefinitionArn"])
        d = td["taskDefinition"]
        assert (d["cpu"], d["memory"], d["ephemeralStorage"]) == ("1024", "2048", {"sizeInGiB": 30})
        assert d["executionRoleArn"].endswith("role/nel-exec")
        assert d["taskRoleArn"].endswith("role/nel-task")
        assert (d["networkMode"], d["requiresCompatibilities"]) == ("awsvpc", ["FARGATE"])
        main, ssh = d["containerDefinitions"]
        assert (main["name"], main["image"], ssh["name"]) == ("main", "python:3.12-slim", "ssh-tunnel")
        assert main["environment"] == [{"name": "FROM_CONFIG", "value": "c"},
                                       {"name": "FROM_SPEC", "value": "s"}]
        assert "sk-must-not-reach-aws" not in json.dumps(td)
        assert "print(1)" not in json.dumps(td)  # files go through the exec server, later
        assert main["logConfiguration"]["options"]["awslogs-group"] == "/nel/sandboxes"
        assert main["logConfiguration"]["options"]["awslogs-stream-prefix"] == "hx"
        assert ssh["environment"] == [{"name": "SSH_PUBLIC_KEY",
                                       "value": "ssh-ed25519 AAAAtest nel"}]
        assert "-p 2022" in ssh["command"][0] and "(sleep 900; kill 1)" in ssh["command"][0]
        # the main container starts nel's own exec server, shipped in its command
        shipped = re.search(r"echo (\S+) \| base64 -d", main["command"][-1])
        assert shipped is not None
        assert base64.b64decode(shipped.group(1)) == Path(exec_server.__file__).read_bytes()
        # the address is the task's network interface's private IP (no public IP asked)
        eni = next(x["value"] for x in tasks[0]["attachments"][0]["details"]
                   if x["name"] == "networkInterfaceId")
        nic = boto3.client("ec2", region_name=REGION).describe_network_interfaces(
            NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
        assert first.address == nic["PrivateIpAddress"] and nic["SubnetId"] == aws["subnet"]
        key_dir = Path(first._key_dir or "")
        assert (key_dir / "id").stat().st_mode & 0o077 == 0  # the private key is ours only
        await first.stop()
        await second.stop()
        await first.stop()  # twice is fine
        assert not key_dir.exists()
        after = ecs.describe_tasks(cluster="nel-sandboxes",
                                   tasks=[first.task_arn, second.task_arn])["tasks"]
        assert {t["lastStatus"] for t in after} == {"STOPPED"}
        assert {t["stoppedReason"] for t in after} == {"nel sandbox teardown"}
        await factory.aclose()
        again = ecs.describe_task_definition(taskDefinition=tasks[0]["taskDefinitionArn"])
        assert again["taskDefinition"]["status"] == "INACTIVE"

    asyncio.run(go())


def test_a_task_that_stops_before_running_fails_the_start_and_is_torn_down(
        aws: dict[str, Any]) -> None:
    factory = EcsFargateSandboxFactory(_config(aws), poll_s=0.05)
    sb = factory.create(SandboxSpec())
    ecs = boto3.client("ecs", region_name=REGION)
    real_run = factory.control.run

    def run_then_stop(arn: str) -> str:  # the task dies at once (as on a bad image)
        task = real_run(arn)
        ecs.stop_task(cluster="nel-sandboxes", task=task, reason="CannotPullContainerError")
        return task

    factory.control.run = run_then_stop  # type: ignore[method-assign]
    with pytest.raises(SandboxError, match="CannotPullContainerError"):
        asyncio.run(sb.start())
    assert sb.task_arn is not None and sb._key_dir is not None
    assert not Path(sb._key_dir).exists()
    asyncio.run(factory.aclose())


def test_refused_before_any_request(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                    tmp_path: Path) -> None:
    cfg = _config(aws)
    assert refusal(cfg) is None
    s3 = refusal(_config(aws, efs_filesystem_id="fs-1"))
    assert s3 is not None and (s3.key, s3.unbuilt) == ("efs_filesystem_id", True)
    assert refusal(_config(aws, cluster=None)) is None  # found in SSM when it starts
    assert (refusal(_config(aws, cluster=None, region=None)) or s3).key == "cluster"
    # a cluster without the sidecar's key secrets: found in SSM when it starts (as in 0.3.0)
    assert refusal(_config(aws, ssh_sidecar=None)) is None
    assert (refusal(_config(aws, ssh_sidecar={"port": 1})) or s3).key == "ssh_sidecar"  # unknown key
    # in a config: one line naming the key, before any request
    path = tmp_path / "ecs.yaml"
    path.write_text(ECS_CONFIG.format(**aws))
    check_supported(load_config(path))
    path.write_text(ECS_CONFIG.format(**aws) + "    efs_filesystem_id: fs-1\n")
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(path))
    assert str(err.value) == (
        f"{path}:19: key sandboxes.box.efs_filesystem_id: EFS volumes in ecs_fargate "
        "sandboxes is not supported yet in nel; remove `efs_filesystem_id`")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "creds"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    none = refusal(cfg)
    assert none is not None and none.key == "type" and not none.unbuilt
    assert none.why.startswith("no AWS credentials here")
    with pytest.raises(SandboxError, match=r"^ecs_fargate sandbox, key type: no AWS credentials"):
        EcsFargateSandboxFactory(cfg)
    path.write_text(ECS_CONFIG.format(**aws))
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(path))
    assert str(err.value) == (
        f"{path}:8: key sandboxes.box.type: ecs_fargate sandbox cannot run here: {none.why}")
    # a profile in the shared files counts, named or default
    (tmp_path / "config").write_text("[profile eval]\ncredential_process = /bin/true\n")
    assert not has_aws_credentials()
    monkeypatch.setenv("AWS_PROFILE", "eval")
    assert has_aws_credentials()
    monkeypatch.delenv("AWS_PROFILE")
    (tmp_path / "creds").write_text("[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
    assert has_aws_credentials()


def test_tunnel_command_line() -> None:
    assert ssh_argv(host="10.7.1.5", port=2022, key_file="/k/id", local_port=40001,
                    remote_port=19542) == [
        "ssh", "-N", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "ServerAliveInterval=30", "-o", "ExitOnForwardFailure=yes",
        "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
        "-i", "/k/id", "-p", "2022", "-L", "127.0.0.1:40001:127.0.0.1:19542", "root@10.7.1.5"]


def test_an_agent_in_the_task_reaches_nels_proxy_back_through_the_tunnel(
        aws: dict[str, Any]) -> None:
    """The OpenClaw solver in the task calls nel's proxy at its 127.0.0.1 port: the tunnel
    forwards that port back (and the sidecar's sshd allows remote forwards)."""
    argv = ssh_argv(host="10.7.1.5", port=2022, key_file="/k/id", local_port=40001,
                    remote_port=19542, reach_ports=(41234, 41235))
    assert argv[-5:] == ["-R", "127.0.0.1:41234:127.0.0.1:41234",
                         "-R", "127.0.0.1:41235:127.0.0.1:41235", "root@10.7.1.5"]
    settings = EcsSettings.from_config(_config(aws))
    td = task_definition(settings, image="img", env={}, public_key="ssh-ed25519 AAAA")
    (sshd,) = td["containerDefinitions"][1]["command"]
    assert "AllowTcpForwarding=yes" in sshd


# -- the exec server, as the task's main container runs it --------------------------------

@pytest.fixture(scope="module")
def exec_port() -> Iterator[int]:
    proc = ManagedProcess([sys.executable, exec_server.__file__], name="exec-server",
                          env={"NEL_EXEC_PORT": "0", "NEL_EXEC_BIND": "127.0.0.1"}).start()
    try:
        yield port_from_log(proc, r"listening (\d+)")
    finally:
        proc.stop()


def _procs_with(marker: str) -> list[str]:
    """Command lines holding `marker`. Each is read once: a process may exit between two
    reads of its /proc entry (CI once failed on a second read of a process gone by then)."""
    found = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = p.read_text(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(cmd)
    return found


def test_exec_server_runs_commands_with_timeout_cap_and_cleanup(exec_port: int,
                                                                tmp_path: Path) -> None:
    marker = f"nel-ecs-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        client = ExecClient(exec_port)
        try:
            assert await client.health()
            r = await client.exec("echo $A; pwd; cat; echo err >&2; exit 4", timeout_sec=30,
                                  cwd=str(tmp_path), env={"A": "from-env"}, stdin=b"in\n",
                                  output_limit=1000)
            assert (r.stdout, r.stderr, r.return_code, r.stopped) == \
                (f"from-env\n{tmp_path}\nin\n", "err\n", 4, None)
            argv = await client.exec(["python3", "-c", "import sys; print(sys.argv)", "a b"],
                                     timeout_sec=30, cwd=None, env=None, stdin=None,
                                     output_limit=1000)
            assert argv.ok and argv.stdout == "['-c', 'a b']\n"
            slow = await client.exec(f"exec -a {marker}-t sleep 300", timeout_sec=1, cwd=None,
                                     env=None, stdin=None, output_limit=1000)
            assert slow.stopped == "timeout"
            flood = await client.exec("yes", timeout_sec=60, cwd=None, env=None, stdin=None,
                                      output_limit=5000)
            assert flood.stopped == "output_limit" and flood.truncated and len(flood.stdout) == 5000
            left = await client.exec(f"(exec -a {marker}-bg sleep 300 &) ; echo done",
                                     timeout_sec=30, cwd=None, env=None, stdin=None,
                                     output_limit=1000)
            assert left.ok and left.stdout == "done\n"
            wait_for(lambda: not _procs_with(marker), timeout=30, what=f"{marker} to be killed")
            data = bytes(range(256)) * 100
            await client.upload(data, str(tmp_path / "deep" / "f.bin"))
            assert await client.download(str(tmp_path / "deep" / "f.bin")) == data
            with pytest.raises(SandboxError, match="404"):
                await client.download(str(tmp_path / "missing"))
        finally:
            await client.close()

    asyncio.run(go())


@pytest.mark.parametrize(("path", "body"), [
    ("/exec", b"not json"), ("/exec", b"[1, 2]"), ("/exec", b'{"cmd": 5}'),
    ("/exec", b'{"cmd": "true", "timeout": -1}'), ("/upload", b'{"path": "/tmp/x"}'),
    ("/upload", b'{"path": "/tmp/x", "content_b64": "!!!"}'), ("/exec", b""),
])
def test_exec_server_answers_malformed_requests_with_400(exec_port: int, path: str,
                                                         body: bytes) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{exec_port}{path}", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(req, timeout=30)
    assert err.value.code == 400


def test_a_block_without_cluster_finds_it_in_ssm(aws: dict[str, Any]) -> None:
    """NeMo Evaluator's SSM discovery (examples 18, 19): `/<ssm_project>/ecs-sandbox/config`,
    read from moto's SSM when the sandbox starts; the block's own values win."""
    from nel_resources.sandboxes import ssm_discovery

    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name="/evalproj/ecs-sandbox/config", Type="String", Value=json.dumps({
        "cluster": "nel-sandboxes", "subnets": [aws["subnet"]], "security_groups": [aws["sg"]],
        "execution_role_arn": "arn:aws:iam::123456789012:role/from-ssm",
        "log_group": "/ssm/logs", "assign_public_ip": False,
        "ssh_sidecar": {"public_key_secret_arn": aws["pub"], "private_key_secret_arn": aws["priv"],
                        "sshd_port": 2200}}))
    block = SandboxConfig(type="ecs_fargate", image="python:3.12-slim", region=REGION,
                          ssm_project="evalproj", task_role_arn="arn:aws:iam::123456789012:role/mine")
    assert refusal(block) is None
    s = EcsSettings.from_config(block)
    assert (s.cluster, s.subnets, s.security_groups) == ("nel-sandboxes", [aws["subnet"]], [aws["sg"]])
    assert s.execution_role_arn.endswith("role/from-ssm") and s.task_role_arn.endswith("role/mine")
    assert (s.public_key_secret_arn, s.private_key_secret_arn) == (aws["pub"], aws["priv"])
    assert (s.log_group, s.assign_public_ip, s.sshd_port) == ("/ssm/logs", False, 2200)
    missing = SandboxConfig(type="ecs_fargate", region=REGION, ssm_project="nothing-here")
    with pytest.raises(SandboxError) as err:
        EcsSettings.from_config(missing)
    assert str(err.value) == (f"ecs_fargate sandbox: SSM parameter '/nothing-here/ecs-sandbox/config' "
                              f"not found in {REGION}; apply the ecs-sandbox Terraform stack there, "
                              "or give `cluster`, `subnets`, `execution_role_arn` and `ssh_sidecar`")
    ssm.put_parameter(Name="/thin/ecs-sandbox/config", Type="String",
                      Value=json.dumps({"cluster": "c", "subnets": ["s"]}))
    with pytest.raises(SandboxError, match=r"no `execution_role_arn` in the block or in SSM "
                                           r"parameter '/thin/ecs-sandbox/config'"):
        EcsSettings.from_config(SandboxConfig(type="ecs_fargate", region=REGION, ssm_project="thin"))
    assert (REGION, "/evalproj/ecs-sandbox/config") in ssm_discovery._CACHE  # read once per process


def test_a_block_with_a_cluster_takes_what_it_leaves_out_from_ssm(aws: dict[str, Any]) -> None:
    """Walkthrough wt06: `cluster` and `subnets` in the block, the execution role and the
    sidecar's key secrets from SSM (0.3.0 fills each missing key from the parameter)."""
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name="/withcluster/ecs-sandbox/config", Type="String", Value=json.dumps({
        "cluster": "from-ssm", "subnets": ["subnet-ssm"],
        "execution_role_arn": "arn:aws:iam::123456789012:role/exec-ssm",
        "ssh_sidecar": {"public_key_secret_arn": aws["pub"], "private_key_secret_arn": aws["priv"]}}))
    block = SandboxConfig(type="ecs_fargate", image="python:3.12-slim", region=REGION,
                          ssm_project="withcluster", cluster="harbor-cluster", subnets=[aws["subnet"]])
    assert refusal(block) is None
    s = EcsSettings.from_config(block)
    assert (s.cluster, s.subnets) == ("harbor-cluster", [aws["subnet"]])  # the block's own win
    assert s.execution_role_arn.endswith("role/exec-ssm")
    assert (s.public_key_secret_arn, s.private_key_secret_arn) == (aws["pub"], aws["priv"])
    ssm.put_parameter(Name="/norole/ecs-sandbox/config", Type="String", Value=json.dumps({}))
    with pytest.raises(SandboxError, match=r"no `execution_role_arn` in the block or in SSM "
                                           r"parameter '/norole/ecs-sandbox/config'"):
        EcsSettings.from_config(SandboxConfig(type="ecs_fargate", region=REGION, ssm_project="norole",
                                              cluster="c", subnets=["s"]))
