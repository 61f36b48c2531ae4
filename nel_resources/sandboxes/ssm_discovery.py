"""An `ecs_fargate` block finds what it leaves out of its infrastructure (no `cluster`, or a
cluster without subnets, execution role or sidecar key secrets) in SSM Parameter Store, as
NeMo Evaluator 0.3.0 does: the JSON parameter `/<ssm_project>/ecs-sandbox/config` in `region`
(written by its Terraform stack) gives the cluster, subnets, security groups, roles, log group
and the SSH sidecar's key secrets; a value the block sets wins over the parameter's.

Read when the sandbox starts (a run), never by the config checks or a dry run (which list it
as a check the run makes: it needs AWS). What is missing is one line naming the parameter.
The parameter's `s3_bucket`, `ecr_repository`, `codebuild_service_role` and
`dockerhub_secret_arn` serve task image builds (ecr_build), as in 0.3.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.sandboxes.base import SandboxError

DEFAULT_SSHD_PORT = 2222
_CACHE: dict[tuple[str, str], dict[str, Any]] = {}  # (region, project) -> parameter, per process


@dataclass(frozen=True)
class Discovered:
    """The infrastructure values of one block (its own, or filled from SSM)."""

    cluster: str
    subnets: list[str]
    execution_role_arn: str
    public_key_secret_arn: str
    private_key_secret_arn: str
    security_groups: list[str] = field(default_factory=list)
    assign_public_ip: bool = True
    task_role_arn: str | None = None
    log_group: str | None = None
    sshd_port: int = DEFAULT_SSHD_PORT
    #: task image builds (ecr_build): 0.3.0 also reads these from the parameter
    s3_bucket: str | None = None
    ecr_repository: str | None = None
    codebuild_service_role: str | None = None
    dockerhub_secret_arn: str | None = None

    @classmethod
    def of_block(cls, cfg: SandboxConfig, ssm: dict[str, Any] | None = None,
                 where: str = "the block") -> Discovered:
        """The block's values, each missing one taken from `ssm` (the parameter's JSON)."""
        ssm = ssm or {}
        sc, ssm_sc = cfg.ssh_sidecar or {}, ssm.get("ssh_sidecar") or {}

        def need(value: Any, key: str) -> Any:
            if not value:
                raise SandboxError(f"ecs_fargate sandbox: no `{key}` in the block or in {where}")
            return value

        return cls(
            cluster=str(need(cfg.cluster or ssm.get("cluster"), "cluster")),
            subnets=list(need(cfg.subnets or ssm.get("subnets"), "subnets")),
            execution_role_arn=str(need(cfg.execution_role_arn or ssm.get("execution_role_arn"),
                                        "execution_role_arn")),
            public_key_secret_arn=str(need(sc.get("public_key_secret_arn")
                                           or ssm_sc.get("public_key_secret_arn"),
                                           "ssh_sidecar.public_key_secret_arn")),
            private_key_secret_arn=str(need(sc.get("private_key_secret_arn")
                                            or ssm_sc.get("private_key_secret_arn"),
                                            "ssh_sidecar.private_key_secret_arn")),
            security_groups=list(cfg.security_groups or ssm.get("security_groups") or []),
            assign_public_ip=bool(next((v for v in (cfg.assign_public_ip,
                                                    ssm.get("assign_public_ip")) if v is not None),
                                       True)),
            task_role_arn=cfg.task_role_arn or ssm.get("task_role_arn"),
            log_group=cfg.log_group or ssm.get("log_group"),
            sshd_port=int(sc.get("sshd_port") or ssm_sc.get("sshd_port") or DEFAULT_SSHD_PORT),
            s3_bucket=cfg.s3_bucket or ssm.get("s3_bucket"),
            ecr_repository=cfg.ecr_repository or ssm.get("ecr_repository"),
            codebuild_service_role=cfg.codebuild_service_role or ssm.get("codebuild_service_role"),
            dockerhub_secret_arn=cfg.dockerhub_secret_arn or ssm.get("dockerhub_secret_arn"))


def needs_discovery(cfg: SandboxConfig) -> bool:
    """Whether the block leaves out a value only SSM can give."""
    sc = cfg.ssh_sidecar or {}
    return not (cfg.cluster and cfg.subnets and cfg.execution_role_arn
                and sc.get("public_key_secret_arn") and sc.get("private_key_secret_arn"))


def parameter_name(cfg: SandboxConfig) -> str:
    """`/<ssm_project>/ecs-sandbox/config`: where 0.3.0's Terraform writes the block's values."""
    return f"/{cfg.ssm_project}/ecs-sandbox/config"


def discover(cfg: SandboxConfig) -> Discovered:
    """The block's infrastructure, completed from its SSM parameter (read once per process).

    Raises:
        SandboxError: the parameter is missing, is not JSON, or lacks a value the block lacks.
    """
    import json

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    # No `region`: boto3's own (AWS_DEFAULT_REGION, ~/.aws/config), as 0.3.0's client uses.
    region, name = cfg.region or boto3.session.Session().region_name or "", parameter_name(cfg)
    if not region:
        raise SandboxError(f"ecs_fargate sandbox: reading SSM parameter {name!r} needs a region: "
                           "set the block's `region` (or AWS_DEFAULT_REGION)")
    key = (region, name)
    if key not in _CACHE:
        try:
            raw = boto3.client("ssm", region_name=region).get_parameter(Name=name)["Parameter"]["Value"]
        except ClientError as exc:
            code = (exc.response.get("Error") or {}).get("Code", "")
            if code == "ParameterNotFound":
                raise SandboxError(f"ecs_fargate sandbox: SSM parameter {name!r} not found in "
                                   f"{region}; apply the ecs-sandbox Terraform stack there, or give "
                                   "`cluster`, `subnets`, `execution_role_arn` and `ssh_sidecar`"
                                   ) from None
            raise SandboxError(f"ecs_fargate sandbox: reading SSM parameter {name!r} in {region}: "
                               f"{code or exc}") from None
        except BotoCoreError as exc:
            raise SandboxError(f"ecs_fargate sandbox: reading SSM parameter {name!r} in {region}: "
                               f"{exc}") from None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SandboxError(f"ecs_fargate sandbox: SSM parameter {name!r} in {region} is not "
                               f"JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise SandboxError(f"ecs_fargate sandbox: SSM parameter {name!r} in {region} is not a "
                               "JSON object")
        _CACHE[key] = value
    return Discovered.of_block(cfg, _CACHE[key], f"SSM parameter {name!r} ({region})")
