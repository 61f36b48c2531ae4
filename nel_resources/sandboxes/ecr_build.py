"""Task images built by AWS CodeBuild into ECR, for the `ecs_fargate` sandbox.

A Harbor task whose `environment/Dockerfile` must be built (an `ecs_fargate` block with
`ecr_repository`) is built the way NeMo Evaluator 0.3.0 builds it (its `ImageBuilder`), with
the same AWS calls, names and tags, so the two tools share an ECR cache:

- the tag is `<name>__<sha256 of the environment directory's paths and bytes, 8 hex>`, the
  name being 0.3.0's for a Harbor task (`nel-harbor-<dataset>-<task>-<12 hex>`), so an
  unchanged task keeps its tag; `ecr describe-images` is asked first and a tag already in
  the repository is not rebuilt;
- the build context (the environment directory, zipped) goes to
  `s3://<s3_bucket>/<s3_prefix or ecs-sandbox>/codebuild/<task>-<nonce>.zip`;
- the CodeBuild project is `codebuild_project`, else `ecs-sandbox-build-<nonce>` created with
  `codebuild_service_role` (privileged: it runs docker); the buildspec logs in to ECR
  (and to Docker Hub with `dockerhub_secret_arn`), runs `docker build`, tags and pushes;
- `start-build` points the build at the S3 context with that buildspec, and `batch-get-builds`
  is polled until it ends; a failed build is one line naming its failed phases.

Unlike 0.3.0, a repository that does not exist is one line before any upload (0.3.0 takes
it for a cache miss and the build's push fails later). Blocking calls: run them in a thread.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nel_resources.sandboxes.base import SandboxError
from nel_resources.sandboxes.refusal import Refusal

#: CodeBuild's image for the build (0.3.0's; it has docker and the AWS CLI)
BUILD_IMAGE = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
DEFAULT_COMPUTE_TYPE = "BUILD_GENERAL1_MEDIUM"
DEFAULT_TIMEOUT_MIN = 60
DEFAULT_S3_PREFIX = "ecs-sandbox"
_FAILED = ("FAILED", "FAULT", "STOPPED", "TIMED_OUT")

__all__ = ["BuildSettings", "EcrImageBuilder", "build_refusal", "buildspec", "ecr_region",
           "image_tag", "repository_name", "sanitize_id", "task_image_name", "task_image_tag",
           "tree_digest"]


def sanitize_id(value: str, max_len: int = 100) -> str:
    """A name safe in an ECR tag and a CodeBuild project (0.3.0's `_sanitize_id`)."""
    return re.sub(r"[^a-zA-Z0-9-]+", "-", value).strip("-")[:max_len] or "task"


def ecr_region(repository: str) -> str | None:
    """The region in an ECR repository URL (`<acct>.dkr.ecr.<region>.amazonaws.com/<name>`)."""
    parts = repository.split(".")
    return parts[3] if len(parts) >= 4 and parts[1] == "dkr" and parts[2] == "ecr" else None


def repository_name(repository: str) -> str:
    """The repository's name (the URL's path, or the value itself)."""
    return repository.split("/", 1)[1] if "/" in repository else repository


def tree_digest(environment_dir: Path) -> str:
    """The sha256 (hex) of every file's relative path and bytes under `environment_dir`, in
    path order: what 0.3.0 hashes for both a task image's name and its tag."""
    h = hashlib.sha256()
    for p in sorted(environment_dir.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(environment_dir).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def task_image_name(environment_dir: Path, digest: str | None = None) -> str:
    """0.3.0's name for a Harbor task's built image, `nel-harbor/<dataset>/<task>:<12 hex of
    the context>` sanitized (the dataset is the task directory's parent's name). `digest`:
    the context's `tree_digest`, when already computed."""
    task_dir = environment_dir.parent
    dataset = task_dir.parent.name.replace("/", "__").replace("@", "_")
    task = task_dir.name.replace("/", "__").replace(":", "_")
    digest = digest or tree_digest(environment_dir)
    return sanitize_id(f"nel-harbor/{dataset}/{task}:{digest[:12]}")


def task_image_tag(environment_dir: Path) -> str:
    """The ECR tag of a Harbor task's built image: 0.3.0's, so both tools share the cache
    (the build context is read once for the name and the tag)."""
    digest = tree_digest(environment_dir)
    return image_tag(environment_dir, task_image_name(environment_dir, digest), digest)


def image_tag(environment_dir: Path, name: str, digest: str | None = None) -> str:
    """`<name>__<8 hex>`: the hash of every file's relative path and bytes (0.3.0's tag), so
    the tag changes exactly when the build context does."""
    return f"{name}__{(digest or tree_digest(environment_dir))[:8]}"


@dataclass(frozen=True)
class BuildSettings:
    """Where and how an `ecs_fargate` block builds task images (checked: see `of`)."""

    ecr_repository: str
    region: str
    s3_bucket: str
    s3_prefix: str = DEFAULT_S3_PREFIX
    codebuild_project: str | None = None
    codebuild_service_role: str | None = None
    compute_type: str = DEFAULT_COMPUTE_TYPE
    timeout_min: int = DEFAULT_TIMEOUT_MIN
    dockerhub_secret_arn: str | None = None

    @classmethod
    def of(cls, cfg: Any, *, region: str | None, s3_bucket: str | None,
           ecr_repository: str | None, codebuild_service_role: str | None,
           dockerhub_secret_arn: str | None) -> BuildSettings | None:
        """The block's build settings (its values, else SSM's), or None without a repository.

        Raises:
            SandboxError: one line naming what the block lacks to build.
        """
        if not ecr_repository:
            return None
        where = region or ecr_region(ecr_repository) or _default_region()
        if not where:
            raise SandboxError("ecs_fargate sandbox: building task images needs a region: set "
                               "the block's `region` (or AWS_DEFAULT_REGION)")
        if not s3_bucket:
            raise SandboxError("ecs_fargate sandbox: building task images into `ecr_repository` "
                               "needs `s3_bucket` (the build context is uploaded there)")
        if not (cfg.codebuild_project or codebuild_service_role):
            raise SandboxError("ecs_fargate sandbox: building task images needs "
                               "`codebuild_project`, or `codebuild_service_role` to create one")
        return cls(ecr_repository=ecr_repository, region=where, s3_bucket=s3_bucket,
                   s3_prefix=cfg.s3_prefix or DEFAULT_S3_PREFIX,
                   codebuild_project=cfg.codebuild_project,
                   codebuild_service_role=codebuild_service_role,
                   compute_type=cfg.codebuild_compute_type or DEFAULT_COMPUTE_TYPE,
                   timeout_min=int(cfg.codebuild_build_timeout or DEFAULT_TIMEOUT_MIN),
                   dockerhub_secret_arn=dockerhub_secret_arn)


def build_refusal(cfg: Any) -> Refusal | None:
    """A block that builds task images but lacks what to build with (checked before any
    request when SSM cannot add it: a block with its cluster, subnets, roles and keys)."""
    from nel_resources.sandboxes.ssm_discovery import needs_discovery

    if not cfg.ecr_repository or needs_discovery(cfg):
        return None  # nothing to build, or SSM may hold `s3_bucket` / the CodeBuild role
    try:
        BuildSettings.of(cfg, region=cfg.region, s3_bucket=cfg.s3_bucket,
                         ecr_repository=cfg.ecr_repository,
                         codebuild_service_role=cfg.codebuild_service_role,
                         dockerhub_secret_arn=cfg.dockerhub_secret_arn)
    except SandboxError as exc:
        return Refusal("ecr_repository", str(exc).removeprefix("ecs_fargate sandbox: "))
    return None


def _default_region() -> str | None:
    """boto3's own region (AWS_DEFAULT_REGION, ~/.aws/config): read locally, no request."""
    try:
        import boto3
    except ImportError:
        return None
    return boto3.session.Session().region_name


def buildspec(s: BuildSettings, tag: str) -> str:
    """The CodeBuild buildspec: log in to ECR (and Docker Hub), build, tag, push (0.3.0's)."""
    image_url = f"{s.ecr_repository}:{tag}"
    registry = s.ecr_repository.split("/")[0]
    local = f"{repository_name(s.ecr_repository)}:{tag}"
    pre = [f"aws ecr get-login-password --region {ecr_region(s.ecr_repository) or s.region}"
           f" | docker login --username AWS --password-stdin {registry}"]
    if s.dockerhub_secret_arn:
        # a failed Docker Hub login only costs rate limits: the build goes on without it
        pre.append(f"DOCKERHUB_CREDS=$(aws secretsmanager get-secret-value --secret-id "
                   f"{s.dockerhub_secret_arn} --query SecretString --output text --region "
                   "$AWS_DEFAULT_REGION)"
                   ' && DH_USER=$(echo "$DOCKERHUB_CREDS" | python3 -c'
                   """ "import sys,json;print(json.load(sys.stdin)['username'])")"""
                   ' && echo "$DOCKERHUB_CREDS" | python3 -c'
                   """ "import sys,json;print(json.load(sys.stdin)['password'])" """
                   '| docker login -u "$DH_USER" --password-stdin'
                   ' || echo "Docker Hub login failed: continuing without it"')
    build = (f"for i in 1 2 3; do docker build -t {local} . && break; "
             'echo "build failed ($i/3), retry in 30s"; sleep 30; done')
    lines = ["version: 0.2", "phases:", "  pre_build:", "    commands:",
             *(f"      - {c}" for c in pre), "  build:", "    commands:", f"      - {build}",
             f"      - docker tag {local} {image_url}", "  post_build:", "    commands:",
             f"      - docker push {image_url}"]
    return "\n".join(lines) + "\n"


def _zip_dir(root: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for item in sorted(root.rglob("*")):
            if item.is_file():
                zf.write(item, arcname=str(item.relative_to(root)))
    return buf.getvalue()


class EcrImageBuilder:
    """Builds task images by CodeBuild into ECR, each tag at most once per process.

    The endpoint is boto3's usual resolution (AWS_ENDPOINT_URL points it at an emulator)."""

    def __init__(self, settings: BuildSettings, *, poll_s: float = 10.0) -> None:
        import boto3

        self.s = settings
        self._poll_s = poll_s
        self._ecr = boto3.client("ecr", region_name=ecr_region(settings.ecr_repository)
                                 or settings.region)
        self._s3 = boto3.client("s3", region_name=settings.region)
        self._cb = boto3.client("codebuild", region_name=settings.region)
        self._lock = threading.Lock()
        self._tag_locks: dict[str, threading.Lock] = {}
        #: builds this builder started, tag -> build id (what a run reports)
        self.built: dict[str, str] = {}

    def image_url(self, tag: str) -> str:
        """`<ecr_repository>:<tag>`."""
        return f"{self.s.ecr_repository}:{tag}"

    def exists(self, tag: str) -> bool:
        """Whether the repository holds `tag` (ecr describe-images).

        Raises:
            SandboxError: the repository does not exist, or ECR refuses the call (one line).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        name = repository_name(self.s.ecr_repository)
        try:
            self._ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": tag}])
            return True
        except ClientError as exc:
            code = (exc.response.get("Error") or {}).get("Code", "")
            if code == "ImageNotFoundException":
                return False
            if code == "RepositoryNotFoundException":
                raise SandboxError(f"ecs_fargate sandbox: ECR repository {name!r} does not exist "
                                   f"in {self._ecr.meta.region_name}: create it (aws ecr "
                                   f"create-repository --repository-name {name}) or fix "
                                   "`ecr_repository`") from None
            raise SandboxError(f"ecs_fargate sandbox: ecr describe-images {name}:{tag}: "
                               f"{code or exc}") from None
        except BotoCoreError as exc:
            raise SandboxError(f"ecs_fargate sandbox: ecr describe-images {name}:{tag}: {exc}"
                               ) from None

    def ensure(self, environment_dir: Path) -> str:
        """The image URL of a Harbor task's build context (its `environment/`), built first
        unless ECR has its tag."""
        tag = task_image_tag(environment_dir)
        name = environment_dir.parent.name
        with self._lock:
            tag_lock = self._tag_locks.setdefault(tag, threading.Lock())
        with tag_lock:  # two samples of one task: one build, the other waits for it
            if tag in self.built or self.exists(tag):
                return self.image_url(tag)
            self.built[tag] = self._build(environment_dir, sanitize_id(name), tag)
        return self.image_url(tag)

    def _build(self, environment_dir: Path, name: str, tag: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        nonce = uuid.uuid4().hex[:8]
        key = f"{self.s.s3_prefix}/codebuild/{name}-{nonce}.zip"
        spec = buildspec(self.s, tag)
        try:
            self._s3.put_object(Bucket=self.s.s3_bucket, Key=key, Body=_zip_dir(environment_dir))
            project = self._project(nonce, spec, f"{self.s.s3_bucket}/{key}")
            build_id = self._cb.start_build(
                projectName=project, sourceTypeOverride="S3",
                sourceLocationOverride=f"{self.s.s3_bucket}/{key}", buildspecOverride=spec,
                timeoutInMinutesOverride=self.s.timeout_min, privilegedModeOverride=True,
                environmentTypeOverride="LINUX_CONTAINER", imageOverride=BUILD_IMAGE,
                computeTypeOverride=self.s.compute_type)["build"]["id"]
        except ClientError as exc:
            err = exc.response.get("Error") or {}
            raise SandboxError(f"ecs_fargate sandbox: building {self.image_url(tag)}: "
                               f"{exc.operation_name}: {err.get('Code')}: "
                               f"{err.get('Message', '')}".rstrip(": ")) from None
        except BotoCoreError as exc:
            raise SandboxError(f"ecs_fargate sandbox: building {self.image_url(tag)}: {exc}"
                               ) from None
        self._wait(str(build_id), tag)
        return str(build_id)

    def _project(self, nonce: str, spec: str, location: str) -> str:
        """`codebuild_project`, else a new project (0.3.0's name) whose source is this
        build's context and buildspec (0.3.0 leaves it empty: the build's overrides say it)."""
        if self.s.codebuild_project:
            return self.s.codebuild_project
        name = f"ecs-sandbox-build-{nonce}"
        self._cb.create_project(
            name=name, source={"type": "S3", "location": location, "buildspec": spec},
            artifacts={"type": "NO_ARTIFACTS"},
            environment={"type": "LINUX_CONTAINER", "image": BUILD_IMAGE,
                         "computeType": self.s.compute_type, "privilegedMode": True},
            serviceRole=str(self.s.codebuild_service_role), timeoutInMinutes=self.s.timeout_min)
        return name

    def _wait(self, build_id: str, tag: str) -> None:
        """Poll batch-get-builds until the build ends; a failure is one line."""
        deadline = time.monotonic() + self.s.timeout_min * 60 + 600  # queueing included
        while True:
            build = self._cb.batch_get_builds(ids=[build_id])["builds"][0]
            status = build.get("buildStatus")
            if status == "SUCCEEDED":
                return
            if status in _FAILED:
                failed = [f"{p['phaseType']}: {p.get('phaseStatus')}"
                          for p in build.get("phases") or []
                          if p.get("phaseStatus") not in (None, "SUCCEEDED")]
                raise SandboxError(f"ecs_fargate sandbox: CodeBuild failed for "
                                   f"{self.image_url(tag)}: {'; '.join(failed) or status} "
                                   f"(build {build_id})")
            if time.monotonic() > deadline:
                raise SandboxError(f"ecs_fargate sandbox: CodeBuild {build_id} still "
                                   f"{status} after {self.s.timeout_min} min")
            time.sleep(self._poll_s)
