"""The Docker engine for `nel package` tests: started (and installed) by the project's own
`deploy/docker/start_engine.sh`, with the locally built base image `localdebian:bookworm-py`
(nothing can be pulled here). Skips locally when it cannot start; fails in CI."""

from __future__ import annotations

import os
import subprocess

from tests.support.realcomponents import REPO_ROOT, require_real_component

BASE_IMAGE = "localdebian:bookworm-py"


def start_docker_engine() -> str:
    """Start the engine if needed (idempotent; the first call may take minutes: it installs
    docker.io and debootstraps the base image) and return its DOCKER_HOST."""
    script = REPO_ROOT / "deploy" / "docker" / "start_engine.sh"
    # The engine accepts `--gpus` through a stand-in of NVIDIA's hook (launched model servers
    # in containers ask for their GPUs so: tests/dagster_project/test_docker_gpu_servers.py).
    hook = REPO_ROOT / "tests" / "support" / "gpu_servers" / "hook" / "nvidia-container-runtime-hook"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env={**os.environ, "NEL_DOCKER_PY_BASE": "1",
                               "NEL_DOCKER_GPU_HOOK": str(hook)}, timeout=1200)
    if proc.returncode != 0:
        require_real_component(f"the Docker engine did not start: {proc.stderr.strip()[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("export DOCKER_HOST="):
            return line.split("=", 1)[1]
    require_real_component(f"start_engine.sh printed no DOCKER_HOST: {proc.stdout!r}")


#: The xdist group of the modules that build and run nel's image (nel:local): one worker
#: builds it, the others never build it at the same time.
NEL_IMAGE_GROUP = "nel_image"
#: deploy/docker-compose.yaml's Postgres image, built from deploy/docker/postgres.Dockerfile.
POSTGRES_TAG = "nel-postgres:local"


def build_postgres_image(tag: str = POSTGRES_TAG, base_image: str = BASE_IMAGE) -> str:
    """Build deploy/docker/postgres.Dockerfile as `tag` (the compose file's header's
    `docker build`), unless an image of that tag was built from the same inputs already (its
    `nel.context` label: the Dockerfile, its entrypoint and the base image's id), so the
    suite pays for the apt-get of Postgres once. Returns the image id."""
    import hashlib

    docker = docker_client()
    here = REPO_ROOT / "deploy" / "docker"
    base = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", base_image],
                          capture_output=True, text=True)
    assert base.returncode == 0, f"no base image {base_image}: {base.stderr.strip()}"
    h = hashlib.sha256(base.stdout.strip().encode())
    for name in ("postgres.Dockerfile", "postgres-entrypoint.sh"):
        h.update((here / name).read_bytes())
    digest = h.hexdigest()[:16]
    inspect = [docker, "image", "inspect", "--format", '{{.Id}} {{index .Config.Labels "nel.context"}}', tag]
    have = subprocess.run(inspect, capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.split()[1:] == [digest]:
        return have.stdout.split()[0]
    proc = subprocess.run([docker, "build", "-q", "--build-arg", f"BASE_IMAGE={base_image}",
                           "--label", f"nel.context={digest}", "-t", tag,
                           "-f", str(here / "postgres.Dockerfile"), str(here)],
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        require_real_component(f"docker build of {tag} failed: {proc.stderr.strip()[-2000:]}")
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.split()[0]


def docker_client() -> str:
    """The docker CLI start_engine.sh talks to its engine with: Debian's /usr/bin/docker
    (it matches the engine's API), else the first `docker` on PATH."""
    import shutil

    if os.path.exists("/usr/bin/docker"):
        return "/usr/bin/docker"
    exe = shutil.which("docker")
    if exe is None:
        require_real_component("no docker client (deploy/docker/start_engine.sh installs docker.io)")
    return exe
