"""Build nel's own container image (deploy/docker/Dockerfile) with the local Docker engine.

The image holds everything `nel eval run`, the Dagster code location (for dagster-docker's
run launcher), `nel serve` and the shard worker need: nel's dependencies are installed from
a wheelhouse filled once on the host (`container_image.ensure_wheelhouse`), so the build
itself needs no network and works where no registry is reachable.

    python -m nel_resources.launchers.nel_image --tag nel:local [--base localdebian:bookworm-py]

No Dagster here.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from nel_resources.images.container_image import (
    NEL_PACKAGES,
    _docker,
    base_python,
    docker_bin,
    ensure_wheelhouse,
    source_root,
)

#: The base image made locally by `NEL_DOCKER_PY_BASE=1 deploy/docker/start_engine.sh`.
LOCAL_BASE_IMAGE = "localdebian:bookworm-py"
#: What the image adds to nel's own dependencies: the run launcher and the shared instance.
IMAGE_EXTRAS = ["dagster-docker==0.29.27", "dagster-postgres==0.29.27"]


def image_requirements(root: Path | None = None) -> list[str]:
    """nel's runtime dependencies (pyproject's `dependencies`) plus IMAGE_EXTRAS."""
    pyproject = (root or source_root()) / "pyproject.toml"
    if pyproject.exists():
        deps = list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    else:  # an installed nel: its metadata, without the extras
        from importlib.metadata import requires

        deps = [r for r in requires("nel") or [] if "extra ==" not in r]
    return [*deps, *IMAGE_EXTRAS]


def dockerfile_path() -> Path:
    """deploy/docker/Dockerfile of this checkout."""
    return source_root() / "deploy" / "docker" / "Dockerfile"


def write_context(context: Path, wheelhouse: Path) -> None:
    """Fill a build context: the Dockerfile, the wheels and nel's packages under src/."""
    shutil.copy2(dockerfile_path(), context / "Dockerfile")
    shutil.copytree(wheelhouse, context / "wheels")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for pkg in NEL_PACKAGES:
        shutil.copytree(source_root() / pkg, context / "src" / pkg, ignore=ignore)


def context_digest(base_image: str, requirements: list[str]) -> str:
    """A hash of what goes into the image: base, requirements, Dockerfile and nel's source."""
    h = hashlib.sha256("\n".join([base_image, *requirements]).encode())
    h.update(dockerfile_path().read_bytes())
    root = source_root()
    for pkg in NEL_PACKAGES:
        for p in sorted((root / pkg).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith("."):
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build_nel_image(tag: str, base_image: str = LOCAL_BASE_IMAGE) -> str:
    """Build `tag` unless an image of that tag was built from the same context already
    (its `nel.context` label), so a run pays for a build only after the source changed.

    Returns:
        The image id.

    Raises:
        NelError: docker is missing, the wheels cannot be fetched, or the build fails.
    """
    reqs = image_requirements()
    digest = context_digest(base_image, reqs)
    have = subprocess.run([docker_bin(), "image", "inspect", "--format",
                           '{{.Id}} {{index .Config.Labels "nel.context"}}', tag],
                          capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.split()[1:] == [digest]:
        return have.stdout.split()[0]
    py, machine = base_python(base_image)
    wheels = ensure_wheelhouse(reqs, py, machine)
    with tempfile.TemporaryDirectory(prefix="nel-image-") as tmp:
        ctx = Path(tmp)
        write_context(ctx, wheels)
        _docker(["build", "-q", "--build-arg", f"BASE_IMAGE={base_image}",
                 "--label", f"nel.context={digest}", "-t", tag, str(ctx)],
                what=f"docker build of {tag}")
    proc = _docker(["image", "inspect", "--format", "{{.Id}}", tag], what=f"inspecting {tag}")
    return proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """`python -m nel_resources.launchers.nel_image`: build nel's image."""
    from benchmarks.errors import NelError

    ap = argparse.ArgumentParser(prog="python -m nel_resources.launchers.nel_image",
                                 description="Build nel's container image offline.")
    ap.add_argument("--tag", default="nel:local")
    ap.add_argument("--base", default=LOCAL_BASE_IMAGE, help="base image with python3 and venv")
    args = ap.parse_args(argv)
    try:
        print(build_nel_image(args.tag, args.base))
    except NelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
