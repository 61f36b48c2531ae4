"""The local image a `container://image#task` benchmark needs (no Dagster, no engine code);
the name itself is parsed by `benchmarks.uri_schemes.parse_container`.

Lives below the engine so `check_supported` can refuse a harness image that is not in the
local Docker engine before any request, in one line; the engine's `container` solver
(`nel_assets.engine.solvers.container`) runs the image.
"""

from __future__ import annotations

import subprocess


def docker_bin() -> str:
    """The docker CLI nel's Docker sandboxes use (raises SandboxError when there is none)."""
    from nel_resources.sandboxes.docker import docker_cli

    return docker_cli()


def _inspect(image: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([docker_bin(), "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True, timeout=60)


def image_id(image: str) -> str:
    """The local image's id, or '' when the engine cannot say (the run refuses it then)."""
    try:
        proc = _inspect(image)
    except Exception:  # no CLI / no engine: missing_image_reason says why
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def missing_image_reason(image: str) -> str | None:
    """Why `image` cannot run here (no docker CLI or engine, or the image is not local), else
    None. Nothing is ever pulled."""
    from nel_resources.sandboxes.base import SandboxError

    try:
        proc = _inspect(image)
    except SandboxError as exc:
        return str(exc)
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer `docker image inspect` within 60 s"
    if proc.returncode == 0:
        return None
    err = proc.stderr.strip()
    if "no such image" in err.lower():
        return (f"image {image!r} is not in the local Docker engine and nel never pulls: "
                f"`docker pull {image}` or `docker load` it first")
    last = err.splitlines()[-1] if err else "no answer"
    return (f"the Docker engine cannot be asked about image {image!r}: {last} (is DOCKER_HOST "
            "set? `deploy/docker/start_engine.sh` prints it)")
