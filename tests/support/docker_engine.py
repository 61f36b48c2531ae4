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
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env={**os.environ, "NEL_DOCKER_PY_BASE": "1"}, timeout=1200)
    if proc.returncode != 0:
        require_real_component(f"the Docker engine did not start: {proc.stderr.strip()[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("export DOCKER_HOST="):
            return line.split("=", 1)[1]
    require_real_component(f"start_engine.sh printed no DOCKER_HOST: {proc.stdout!r}")
