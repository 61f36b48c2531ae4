"""The `ecs_fargate` sandbox: one Fargate task per sandbox, commands through an SSH tunnel.

How it runs (the same shape as NeMo Evaluator 0.3.0's, written for nel):
- control plane, through boto3 (`EcsTaskControl`): the SSH key pair is read from Secrets
  Manager (`ssh_sidecar.public_key_secret_arn` / `private_key_secret_arn`); a task definition
  is registered with the block's `cpu` / `memory` / `ephemeral_storage_gib`, roles and
  `awslogs` log configuration, holding two containers: `main` (the sandbox image, running
  nel's exec server bound to 127.0.0.1) and `ssh-tunnel` (sshd with the public key, and a
  watchdog that ends the task after `max_task_lifetime_sec`); `run-task` starts it on the
  block's subnets and security groups (public IP as `assign_public_ip` says);
  `describe-tasks` is polled until it runs; its address comes from its network interface.
- data plane: `ssh -N -L` forwards a local port to the exec server (`exec_server.py`), which
  runs each command with its timeout and output cap and moves files (no shell involved).
- teardown: the tunnel is closed, `stop-task` is called, and the factory deregisters the task
  definitions it registered.

The control plane is tested against moto's server; the data plane's exec server against a
real local process. What an emulator cannot give is a running container and sshd: the tunnel
itself needs real AWS. A block without `cluster` finds its infrastructure in SSM when it
starts (ssm_discovery, as 0.3.0). A task whose environment must be built is built by
CodeBuild into `ecr_repository` first (ecr_build). The block is refused before any request
without AWS credentials, and for the keys nel has not built (EFS, a container port).
"""

from __future__ import annotations

import asyncio
import base64
import configparser
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.runtime.processes import _restore_default_signals
from nel_resources.sandboxes import exec_server
from nel_resources.sandboxes.base import (
    ExecResult,
    FixedConcurrencyFactory,
    SandboxError,
    SandboxSpec,
)
from nel_resources.sandboxes.ecr_build import BuildSettings, EcrImageBuilder, build_refusal
from nel_resources.sandboxes.limits import Limits
from nel_resources.sandboxes.refusal import Refusal, image_template_refusal
from nel_resources.sandboxes.slurm import parse_memory_mb
from nel_resources.sandboxes.ssm_discovery import Discovered

DEFAULT_EXEC_PORT = 19542
#: keys of NeMo Evaluator's ecs_fargate block whose feature nel has not built, and what it is
# (`ecr_repository`, `s3_bucket` and the `codebuild_*` keys build task images: ecr_build)
UNBUILT_KEYS = {
    "efs_filesystem_id": "EFS volumes", "efs_access_point_id": "EFS volumes",
    "container_port": "exposing a container port",
}
_SIDECAR_KEYS = {"sshd_port", "ssh_ready_timeout_sec", "public_key_secret_arn",
                 "private_key_secret_arn", "image", "exec_server_port"}


def has_aws_credentials(env: Mapping[str, str] | None = None) -> bool:
    """AWS credentials are configured (environment, web identity, container, or a profile in
    the shared files). Checked without any request: no instance-metadata lookup."""
    env = os.environ if env is None else env
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    if any(env.get(k) for k in ("AWS_WEB_IDENTITY_TOKEN_FILE",
                                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                "AWS_CONTAINER_CREDENTIALS_FULL_URI")):
        return True
    profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path(env.get("HOME") or Path.home())
    usable = ("aws_access_key_id", "credential_process", "sso_session", "sso_start_url",
              "role_arn")
    for path, section in ((env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws/credentials",
                           profile),
                          (env.get("AWS_CONFIG_FILE") or home / ".aws/config",
                           profile if profile == "default" else f"profile {profile}")):
        parser = configparser.RawConfigParser()
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(path)
            if parser.has_section(section) and any(parser.has_option(section, k) for k in usable):
                return True
    return False


def refusal(cfg: SandboxConfig) -> Refusal | None:
    """Why this block cannot run from here (checked before any request), or None."""
    if (r := image_template_refusal(cfg)) is not None:
        return r
    for key, what in UNBUILT_KEYS.items():
        if getattr(cfg, key) is not None:
            return Refusal(key, f"{what} in ecs_fargate sandboxes", f"remove `{key}`", True)
    if not cfg.cluster and not cfg.region:
        return Refusal("cluster", "an ecs_fargate sandbox needs `cluster` (or `region`, to find "
                       "the cluster, subnets and roles in SSM: ssm_discovery)")
    if (r := build_refusal(cfg)) is not None:
        return r
    # What the block leaves out (the cluster, subnets, execution role, the SSH sidecar's key
    # secrets) is read from SSM when the sandbox starts (ssm_discovery), key by key, as 0.3.0
    # does; what SSM lacks is one line then.
    sidecar = cfg.ssh_sidecar or {}
    unknown = sorted(set(sidecar) - _SIDECAR_KEYS)
    if unknown:
        return Refusal("ssh_sidecar", f"unknown ssh_sidecar key {unknown[0]!r} "
                       f"(known: {', '.join(sorted(_SIDECAR_KEYS))})")
    if "exec_server_port" in sidecar and sidecar["exec_server_port"] is None:
        return Refusal("ssh_sidecar", "the agent-server mode (exec_server_port: null)",
                       "remove `exec_server_port`", True)
    try:
        import boto3  # noqa: F401
    except ImportError:
        return Refusal("type", "the ecs_fargate sandbox needs boto3 (pip install 'nel[aws]')")
    if not has_aws_credentials():
        return Refusal("type", "no AWS credentials here (set AWS_ACCESS_KEY_ID and "
                       "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or ~/.aws/credentials)", needs="aws")
    return None


@dataclass(frozen=True)
class EcsSettings:
    """One `ecs_fargate` block, checked."""

    cluster: str
    subnets: list[str]
    execution_role_arn: str
    public_key_secret_arn: str
    private_key_secret_arn: str
    region: str | None = None
    security_groups: list[str] = field(default_factory=list)
    assign_public_ip: bool = True
    cpu: str = "4096"
    memory: str = "8192"
    ephemeral_storage_gib: int | None = None
    task_role_arn: str | None = None
    log_group: str | None = None
    log_stream_prefix: str = "nel-sandbox"
    max_task_lifetime_sec: int = 14400
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    sshd_port: int = 2222
    sidecar_image: str = "alpine:latest"
    exec_server_port: int = DEFAULT_EXEC_PORT
    ready_timeout_s: float = 300.0
    #: task image builds into ECR (`ecr_repository`), None when the block builds nothing
    build: BuildSettings | None = None

    @classmethod
    def from_config(cls, cfg: SandboxConfig) -> EcsSettings:
        why = refusal(cfg)
        if why:
            tail = " is not supported yet in nel" if why.unbuilt else ""
            raise SandboxError(f"ecs_fargate sandbox, key {why.key}: {why.why}{tail}")
        from nel_resources.sandboxes.ssm_discovery import discover, needs_discovery

        # A value the block lacks comes from SSM; the block's own values win (as in 0.3.0).
        d = discover(cfg) if needs_discovery(cfg) else Discovered.of_block(cfg)
        sc = cfg.ssh_sidecar or {}
        return cls(cluster=d.cluster, subnets=d.subnets,
                   execution_role_arn=d.execution_role_arn,
                   public_key_secret_arn=d.public_key_secret_arn,
                   private_key_secret_arn=d.private_key_secret_arn, region=cfg.region,
                   security_groups=d.security_groups,
                   assign_public_ip=d.assign_public_ip,
                   cpu=str(cfg.cpu or "4096"),
                   memory=str(parse_memory_mb(cfg.memory if cfg.memory is not None else 8192)),
                   ephemeral_storage_gib=cfg.ephemeral_storage_gib, task_role_arn=d.task_role_arn,
                   log_group=d.log_group, log_stream_prefix=cfg.log_stream_prefix or "nel-sandbox",
                   max_task_lifetime_sec=cfg.max_task_lifetime_sec or 14400, image=cfg.image,
                   env=dict(cfg.container_env), sshd_port=d.sshd_port,
                   sidecar_image=sc.get("image") or "alpine:latest",
                   exec_server_port=int(sc.get("exec_server_port") or DEFAULT_EXEC_PORT),
                   ready_timeout_s=float(sc.get("ssh_ready_timeout_sec") or 300.0),
                   build=BuildSettings.of(
                       cfg, region=cfg.region, s3_bucket=d.s3_bucket,
                       ecr_repository=d.ecr_repository,
                       codebuild_service_role=d.codebuild_service_role,
                       dockerhub_secret_arn=d.dockerhub_secret_arn))


def _log_config(s: EcsSettings, prefix: str) -> dict[str, Any] | None:
    if not s.log_group:
        return None
    return {"logDriver": "awslogs", "options": {
        "awslogs-group": s.log_group, "awslogs-region": s.region or "us-east-1",
        "awslogs-stream-prefix": prefix, "awslogs-create-group": "true"}}


def task_definition(s: EcsSettings, *, image: str, env: Mapping[str, str],
                    public_key: str) -> dict[str, Any]:
    """The register-task-definition request for one sandbox image."""
    # memoryReservation splits the task's memory between the two containers (soft limits)
    sidecar_mib = 128
    main: dict[str, Any] = {
        "name": "main", "image": image, "essential": True,
        "command": exec_server.bootstrap_command(s.exec_server_port),
        "environment": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "memoryReservation": max(128, int(s.memory) - sidecar_mib),
        "dependsOn": [{"containerName": "ssh-tunnel", "condition": "HEALTHY"}],
    }
    watchdog = (f"(sleep {s.max_task_lifetime_sec}; kill 1) & " if s.max_task_lifetime_sec else "")
    sshd = (f"apk add --no-cache openssh-server >/dev/null && mkdir -p /root/.ssh && "
            f'printf "%s\\n" "$SSH_PUBLIC_KEY" > /root/.ssh/authorized_keys && '
            f"chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys && ssh-keygen -A && "
            f"{watchdog}exec /usr/sbin/sshd -D -e -p {s.sshd_port} -o PasswordAuthentication=no "
            f"-o AllowTcpForwarding=yes -o PermitRootLogin=prohibit-password")
    sidecar: dict[str, Any] = {
        "name": "ssh-tunnel", "image": s.sidecar_image, "essential": True,
        "entryPoint": ["sh", "-c"], "command": [sshd], "memoryReservation": sidecar_mib,
        "environment": [{"name": "SSH_PUBLIC_KEY", "value": public_key}],
        "portMappings": [{"containerPort": s.sshd_port, "protocol": "tcp"}],
        "healthCheck": {"command": ["CMD-SHELL", f"nc -z 127.0.0.1 {s.sshd_port} || exit 1"],
                        "interval": 5, "timeout": 3, "retries": 10, "startPeriod": 30},
    }
    for container, prefix in ((main, s.log_stream_prefix), (sidecar, f"{s.log_stream_prefix}-ssh")):
        if (lc := _log_config(s, prefix)) is not None:
            container["logConfiguration"] = lc
    digest = hashlib.sha256(image.encode()).hexdigest()[:10]
    family = re.sub(r"[^A-Za-z0-9_-]", "-", f"nel-sandbox-{image}")[:200] + f"-{digest}"
    req: dict[str, Any] = {
        "family": family, "networkMode": "awsvpc", "requiresCompatibilities": ["FARGATE"],
        "cpu": s.cpu, "memory": s.memory, "executionRoleArn": s.execution_role_arn,
        "containerDefinitions": [main, sidecar],
    }
    if s.task_role_arn:
        req["taskRoleArn"] = s.task_role_arn
    if s.ephemeral_storage_gib:
        req["ephemeralStorage"] = {"sizeInGiB": s.ephemeral_storage_gib}
    return req


class EcsTaskControl:
    """The AWS calls of one `ecs_fargate` block (blocking: run them in a thread).

    Task definitions are registered once per distinct request and deregistered by `close`.
    The endpoint is boto3's usual resolution (AWS_ENDPOINT_URL points it at an emulator)."""

    def __init__(self, settings: EcsSettings, *, poll_s: float = 2.0) -> None:
        import boto3

        self.s = settings
        self._poll_s = poll_s
        self._ecs = boto3.client("ecs", region_name=settings.region)
        self._ec2 = boto3.client("ec2", region_name=settings.region)
        self._secrets = boto3.client("secretsmanager", region_name=settings.region)
        self._lock = threading.Lock()
        self._registered: dict[str, str] = {}
        self.builder = EcrImageBuilder(settings.build) if settings.build else None

    def image_for(self, spec: SandboxSpec) -> str:
        """The task's image: built into ECR from its `environment_dir` (a task whose image
        must be built), else the spec's or the block's `image`."""
        if spec.environment_dir:
            env_dir = Path(spec.environment_dir)
            if self.builder is None:
                raise SandboxError(f"task {env_dir.parent.name}: its environment/Dockerfile must "
                                   "be built and the ecs_fargate block has no `ecr_repository` "
                                   "(nor has its SSM parameter): set `ecr_repository`, "
                                   "`s3_bucket` and `codebuild_service_role`")
            return self.builder.ensure(env_dir)
        image = spec.image or self.s.image
        if not image:
            raise SandboxError("an ecs_fargate sandbox needs an image (`image:` or the spec's)")
        return image

    def secret(self, arn: str) -> str:
        """A Secrets Manager secret's string value."""
        return str(self._secrets.get_secret_value(SecretId=arn)["SecretString"])

    def register(self, request: dict[str, Any]) -> str:
        """register-task-definition (once per distinct request); its ARN."""
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        with self._lock:
            if key not in self._registered:
                resp = self._ecs.register_task_definition(**request)
                self._registered[key] = resp["taskDefinition"]["taskDefinitionArn"]
            return self._registered[key]

    def run(self, task_def_arn: str) -> str:
        """run-task on the block's subnets and security groups; the task's ARN."""
        resp = self._ecs.run_task(
            cluster=self.s.cluster, taskDefinition=task_def_arn, launchType="FARGATE", count=1,
            startedBy="nel-sandbox",
            networkConfiguration={"awsvpcConfiguration": {
                "subnets": self.s.subnets, "securityGroups": self.s.security_groups,
                "assignPublicIp": "ENABLED" if self.s.assign_public_ip else "DISABLED"}})
        if resp.get("failures") or not resp.get("tasks"):
            raise SandboxError(f"run-task failed: {resp.get('failures')}")
        return str(resp["tasks"][0]["taskArn"])

    def describe(self, task_arn: str) -> dict[str, Any]:
        tasks = self._ecs.describe_tasks(cluster=self.s.cluster, tasks=[task_arn]).get("tasks")
        if not tasks:
            raise SandboxError(f"task {task_arn} is gone")
        return dict(tasks[0])

    def wait_running(self, task_arn: str, timeout_s: float) -> dict[str, Any]:
        """Poll describe-tasks until the task runs (its description then)."""
        deadline = time.monotonic() + timeout_s
        while True:
            task = self.describe(task_arn)
            status = task.get("lastStatus")
            if status == "RUNNING":
                return task
            if status in ("DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED", "DELETED"):
                raise SandboxError(f"task stopped before running: {task.get('stoppedReason')}")
            if time.monotonic() > deadline:
                raise SandboxError(f"task not running after {timeout_s:.0f} s (last: {status})")
            time.sleep(self._poll_s)

    def address(self, task: dict[str, Any]) -> str:
        """The task's public IP (assign_public_ip) or private IP, from its network interface."""
        details = {d.get("name"): d.get("value") for a in task.get("attachments") or []
                   if a.get("type") == "ElasticNetworkInterface" for d in a.get("details") or []}
        eni = details.get("networkInterfaceId")
        if eni:
            iface = self._ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])
            nic = iface["NetworkInterfaces"][0]
            public = (nic.get("Association") or {}).get("PublicIp")
            if self.s.assign_public_ip and public:
                return str(public)
            if nic.get("PrivateIpAddress"):
                return str(nic["PrivateIpAddress"])
        if details.get("privateIPv4Address"):
            return str(details["privateIPv4Address"])
        raise SandboxError("the task has no network address")

    def stop(self, task_arn: str) -> None:
        """stop-task (teardown)."""
        self._ecs.stop_task(cluster=self.s.cluster, task=task_arn, reason="nel sandbox teardown")

    def close(self) -> None:
        """Deregister the task definitions this block registered."""
        with self._lock:
            arns, self._registered = list(self._registered.values()), {}
        for arn in arns:
            with contextlib.suppress(Exception):
                self._ecs.deregister_task_definition(taskDefinition=arn)


def ssh_argv(*, host: str, port: int, key_file: str, local_port: int, remote_port: int,
             reach_ports: tuple[int, ...] = ()) -> list[str]:
    """The tunnel: local 127.0.0.1:local_port -> the exec server at 127.0.0.1:remote_port in the
    task (the sidecar shares the task's network namespace); each of `reach_ports` (nel's
    proxy, for an agent in the task) forwarded back from the task's 127.0.0.1 to the host's."""
    back = [a for p in reach_ports for a in ("-R", f"127.0.0.1:{p}:127.0.0.1:{p}")]
    return ["ssh", "-N", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ServerAliveInterval=30", "-o", "ExitOnForwardFailure=yes",
            "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
            "-i", key_file, "-p", str(port),
            "-L", f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}", *back, f"root@{host}"]


class ExecClient:
    """nel's side of the exec server (`exec_server.py`), at http://127.0.0.1:<port>."""

    def __init__(self, port: int) -> None:
        import aiohttp

        self._base = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        await self._session.close()

    async def health(self) -> bool:
        import aiohttp

        try:
            async with self._session.get(f"{self._base}/health",
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def exec(self, command: str | list[str], *, timeout_sec: float, cwd: str | None,
                   env: dict[str, str] | None, stdin: bytes | None,
                   output_limit: int) -> ExecResult:
        import aiohttp

        body: dict[str, Any] = {"cmd": command, "timeout": timeout_sec, "cwd": cwd,
                                "env": env or {}, "output_limit": output_limit}
        if stdin is not None:
            body["stdin_b64"] = base64.b64encode(stdin).decode()
        t0 = time.monotonic()
        try:
            async with self._session.post(f"{self._base}/exec", json=body,
                                          timeout=aiohttp.ClientTimeout(total=timeout_sec + 60)) as r:
                answer = await r.json(content_type=None)
                if r.status != 200:
                    raise SandboxError(f"exec server: HTTP {r.status}: {answer.get('error')}")
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise SandboxError(f"exec server unreachable: {e}") from e
        return ExecResult(stdout=answer["stdout"], stderr=answer["stderr"],
                          return_code=int(answer["rc"]), stopped=answer.get("stopped"),
                          truncated=bool(answer.get("truncated")),
                          duration_s=time.monotonic() - t0)

    async def upload(self, data: bytes, remote_path: str) -> None:
        async with self._session.post(f"{self._base}/upload", json={
                "path": remote_path, "content_b64": base64.b64encode(data).decode()}) as r:
            if r.status != 200:
                raise SandboxError(f"upload {remote_path}: HTTP {r.status}: {await r.text()}")

    async def download(self, remote_path: str) -> bytes:
        async with self._session.get(f"{self._base}/download", params={"path": remote_path}) as r:
            if r.status != 200:
                raise SandboxError(f"download {remote_path}: HTTP {r.status}: {await r.text()}")
            return await r.read()


class EcsFargateSandbox:
    """One problem's Fargate task. `start` = `launch` (AWS calls) then `connect` (the tunnel)."""

    def __init__(self, spec: SandboxSpec, control: EcsTaskControl) -> None:
        self._spec, self._control = spec, control
        self.task_arn: str | None = None
        self.address: str | None = None
        self._key_dir: str | None = None
        self._tunnel: asyncio.subprocess.Process | None = None
        self._client: ExecClient | None = None
        self._stopped = False

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    async def start(self) -> None:
        """Launch the task and open the tunnel to its exec server; on failure tear down."""
        try:
            await self.launch()
            await self.connect()
        except BaseException:
            await self.stop()
            raise

    async def launch(self) -> None:
        """Register the task definition, run the task and wait until it runs (AWS calls)."""
        s = self._control.s
        env = {**s.env, **self._spec.env}
        # the spec's files are written by the exec server after connect, never put in the
        # task definition (whose environment is visible to anyone who can describe it)

        def go() -> None:
            image = self._control.image_for(self._spec)  # may build it first (CodeBuild)
            public_key = self._control.secret(s.public_key_secret_arn)
            self._key_dir = tempfile.mkdtemp(prefix="nel-ecs-key-")
            key = Path(self._key_dir) / "id"
            key.touch(mode=0o600)
            key.write_text(self._control.secret(s.private_key_secret_arn).rstrip("\n") + "\n")
            arn = self._control.register(task_definition(s, image=image, env=env,
                                                         public_key=public_key))
            self.task_arn = self._control.run(arn)
            task = self._control.wait_running(self.task_arn, s.ready_timeout_s)
            self.address = self._control.address(task)

        await asyncio.to_thread(go)

    async def connect(self) -> None:
        """Open the SSH tunnel and wait for the exec server's health; write `spec.files`."""
        s = self._control.s
        if self.address is None or self._key_dir is None:
            raise SandboxError("the ecs_fargate sandbox is not launched")
        if shutil.which("ssh") is None:
            raise SandboxError("the ecs_fargate sandbox needs the `ssh` client (openssh-client)")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            local_port = sock.getsockname()[1]
        self._tunnel = await asyncio.create_subprocess_exec(
            *ssh_argv(host=self.address, port=s.sshd_port, key_file=f"{self._key_dir}/id",
                      local_port=local_port, remote_port=s.exec_server_port,
                      reach_ports=self._spec.reach_ports),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_restore_default_signals)
        self._client = ExecClient(local_port)
        deadline = time.monotonic() + s.ready_timeout_s
        while not await self._client.health():
            if self._tunnel.returncode is not None or time.monotonic() > deadline:
                raise SandboxError(f"no exec server through the SSH tunnel to {self.address}")
            await asyncio.sleep(1.0)
        made = await self._client.exec(["mkdir", "-p", self._spec.workdir], timeout_sec=60,
                                       cwd="/", env=None, stdin=None, output_limit=4096)
        if not made.ok:
            raise SandboxError(f"cannot make {self._spec.workdir} in the task: {made.stderr}")
        for rel, content in self._spec.files.items():
            await self._client.upload(content.encode(), self._remote(rel))

    async def exec(self, command: str | list[str], timeout_sec: float = 180, *,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   stdin: bytes | None = None, output_limit: int = 1 << 20) -> ExecResult:
        """Run `command` in the task (the exec server applies the timeout and the cap)."""
        if self._client is None:
            raise SandboxError("the ecs_fargate sandbox is not started")
        return await self._client.exec(command, timeout_sec=timeout_sec,
                                       cwd=self._remote(cwd or "."), env=env, stdin=stdin,
                                       output_limit=output_limit)

    async def upload(self, local_path: Path, remote_path: str) -> None:
        """Send a file's bytes to the exec server (no shell command line)."""
        if self._client is None:
            raise SandboxError("the ecs_fargate sandbox is not started")
        await self._client.upload(await asyncio.to_thread(local_path.read_bytes),
                                  self._remote(remote_path))

    async def download(self, remote_path: str, local_path: Path) -> None:
        """Fetch a file from the exec server."""
        if self._client is None:
            raise SandboxError("the ecs_fargate sandbox is not started")
        data = await self._client.download(self._remote(remote_path))
        local_path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(local_path.write_bytes, data)

    async def stop(self) -> None:
        """Close the tunnel, stop the task, delete the private key. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self._client is not None:
            await self._client.close()
        if self._tunnel is not None and self._tunnel.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._tunnel.pid, signal.SIGKILL)
            await self._tunnel.wait()
        if self.task_arn is not None:
            await asyncio.to_thread(self._control.stop, self.task_arn)
        if self._key_dir is not None:
            shutil.rmtree(self._key_dir, ignore_errors=True)

    def _remote(self, path: str) -> str:
        p = Path(path)
        return str(p if p.is_absolute() else Path(self._spec.workdir) / p)


class EcsFargateSandboxFactory(FixedConcurrencyFactory):
    """A configured `ecs_fargate` block (refused before any request if it cannot run)."""

    def __init__(self, cfg: SandboxConfig, *, poll_s: float = 2.0) -> None:
        self.control = EcsTaskControl(EcsSettings.from_config(cfg), poll_s=poll_s)
        super().__init__(cfg.concurrency)

    def create(self, spec: SandboxSpec) -> EcsFargateSandbox:
        """A new sandbox for `spec` (not started)."""
        return EcsFargateSandbox(spec, self.control)

    async def aclose(self) -> None:
        """Deregister the task definitions this block registered."""
        await asyncio.to_thread(self.control.close)


__all__ = [
    "EcsFargateSandbox",
    "EcsFargateSandboxFactory",
    "EcsSettings",
    "EcsTaskControl",
    "ExecClient",
    "Refusal",
    "build",
    "has_aws_credentials",
    "refusal",
    "ssh_argv",
    "task_definition",
]


def build(cfg: SandboxConfig, limits: Limits | None = None) -> EcsFargateSandboxFactory:
    """An `ecs_fargate` factory from its config block (the `make_factory` entry point).
    The task's size is the block's `cpu` / `memory`; `limits` does not apply to Fargate."""
    if cfg.image_template:
        raise SandboxError("`image_template` (an image per problem) is not supported by nel's "
                           "ecs_fargate sandbox yet: give one `image`")
    return EcsFargateSandboxFactory(cfg)
