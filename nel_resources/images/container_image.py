"""Build a container image that serves a BYOB benchmark (`nel package`), with the Docker engine.

The image runs nel from this checkout's source (copied into the build context), with the
Python packages `nel serve` needs installed from a local wheelhouse: the build itself needs
no network, so it works where no registry is reachable (pull the base image or build it
locally, e.g. `deploy/docker/start_engine.sh`). The wheelhouse is filled once per Python
version of the base image with `pip download` on the host and reused.

Layer order keeps rebuilds cheap: the dependency layer (wheelhouse + venv) is reused as long
as the wheelhouse is unchanged; only nel's source and the benchmark are copied again.

No Dagster here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.errors import NelError

#: What `nel serve` imports (besides the standard library and nel itself).
SERVE_REQUIREMENTS = ["fastapi>=0.110", "uvicorn>=0.29", "httptools>=0.6", "pydantic>=2.6", "orjson>=3.9",
                      "pyyaml>=6"]
#: nel's packages copied into the image (the CLI, the serve app and what they import).
NEL_PACKAGES = ["benchmarks", "nel_resources", "nel_assets", "dagster_project"]
#: The port `nel serve` listens on inside the image (NeMo Evaluator's default).
PORT = 9090
DEFAULT_BASE_IMAGE = "python:3.11-slim"
_DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt", ".yaml", ".yml")

DOCKERFILE = """\
# Built by `nel package`: serves the BYOB benchmark {bench_names} with `nel serve`.
FROM {base_image}
# The dependencies first: this layer is reused as long as the wheelhouse is unchanged.
COPY wheels /opt/nel/wheels
RUN python3 -m venv /opt/nel/venv \\
 && /opt/nel/venv/bin/pip install --no-cache-dir --no-index --find-links /opt/nel/wheels \\
      -r /opt/nel/wheels/requirements.txt \\
 && printf '#!/opt/nel/venv/bin/python\\nimport sys\\nfrom dagster_project.cli.main import main\\nsys.exit(main())\\n' \\
      > /opt/nel/venv/bin/nel && chmod +x /opt/nel/venv/bin/nel
COPY nel /opt/nel/src
COPY bench /app/bench
WORKDIR /app
ENV PYTHONPATH=/opt/nel/src:/app/bench PATH=/opt/nel/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1
EXPOSE {port}
ENTRYPOINT ["nel"]
CMD {cmd}
"""


@dataclass(frozen=True)
class PackagePlan:
    """What goes into the image."""

    module: Path
    benchmarks: list[str]
    base_image: str
    requirements: list[str]

    def imports(self) -> list[str]:
        """What `nel serve --import` loads inside the image (the module is under /app/bench)."""
        m = self.module
        if m.is_file():
            return [f"/app/bench/{m.name}"]
        if (m / "__init__.py").exists():
            return [m.name]  # a package, imported by name (/app/bench is on PYTHONPATH)
        return [f"/app/bench/{m.name}/{p.name}" for p in sorted(m.glob("*.py"))]

    def dockerfile(self) -> str:
        """The Dockerfile text."""
        cmd = ["serve", "-b", self.benchmarks[0]]
        for ref in self.imports():
            cmd += ["--import", ref]
        cmd += ["--host", "0.0.0.0", "--port", str(PORT)]
        return DOCKERFILE.format(base_image=self.base_image, bench_names=", ".join(self.benchmarks),
                                 cmd=json.dumps(cmd), port=PORT)


def plan_package(module: str, base_image: str, requirements: str | None) -> PackagePlan:
    """Check the module (it must register at least one benchmark) and what to install.

    Raises:
        NelError: the module is missing, does not load, or registers no benchmark.
    """
    path = Path(module).expanduser()
    if not path.exists():
        raise NelError(f"Module path not found: {module}")
    path = path.resolve()
    if path.is_dir() and not any(path.glob("*.py")):
        raise NelError(f"{module}: the directory holds no .py file with a @benchmark")
    names = _benchmarks_of(path)
    if not names:
        raise NelError(f"{module}: registers no benchmark (decorate a scorer with @benchmark(...))")
    reqs = list(SERVE_REQUIREMENTS)
    if requirements:
        extra = Path(requirements)
        lines = [ln.split("#", 1)[0].strip() for ln in extra.read_text(encoding="utf-8").splitlines()]
        reqs += [ln for ln in lines if ln]
    return PackagePlan(path, names, base_image, reqs)


def _benchmarks_of(path: Path) -> list[str]:
    """The benchmarks the module registers when loaded (as `nel serve --import` loads it)."""
    from benchmarks import list_benchmarks
    from benchmarks.plugins import load_module

    before = set(list_benchmarks())
    if path.is_dir() and (path / "__init__.py").exists():
        sys.path.insert(0, str(path.parent))  # a package: imported by name, as in the image
        load_module(path.name)
    else:
        for t in [path] if path.is_file() else sorted(path.glob("*.py")):
            load_module(str(t))
    return sorted(set(list_benchmarks()) - before)


class ToolMissing(NelError):
    """A program the command needs is not installed (one line naming what to install)."""


def docker_bin() -> str:
    """The docker client, or ToolMissing naming what to install."""
    exe = shutil.which("docker")
    if exe is None:
        raise ToolMissing("docker not found: install the Docker engine and client "
                       "(Debian: apt-get install docker.io; or deploy/docker/start_engine.sh)")
    return exe


def _docker(args: Sequence[str], *, what: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([docker_bin(), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NelError(f"{what} failed: {last}")
    return proc


def base_python(base_image: str) -> tuple[str, str]:
    """(`X.Y`, machine) of the base image's python3, by running it once."""
    proc = _docker(["run", "--rm", "--network", "none", "--entrypoint", "python3", base_image, "-c",
                    "import sys, platform; print(f'{sys.version_info[0]}.{sys.version_info[1]}', "
                    "platform.machine())"],
                   what=f"running python3 in the base image {base_image}")
    version, machine = proc.stdout.split()
    return version, machine


def wheelhouse_root() -> Path:
    """Where downloaded wheels are kept (`$NEL_WHEELHOUSE`, else ~/.cache/nel/wheelhouse)."""
    explicit = os.environ.get("NEL_WHEELHOUSE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nel" / "wheelhouse"


def ensure_wheelhouse(requirements: list[str], py_version: str, machine: str) -> Path:
    """A directory with wheels for `requirements` on CPython `py_version`/`machine` and a
    `requirements.txt`; downloaded with pip on the first call, reused after."""
    key = hashlib.sha256("\n".join([py_version, machine, *requirements]).encode()).hexdigest()[:12]
    target = wheelhouse_root() / f"cp{py_version.replace('.', '')}-{machine}-{key}"
    done = target / "requirements.txt"
    if done.exists():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "reqs.in").write_text("\n".join(requirements) + "\n")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(tmp),
           "--python-version", py_version, "--implementation", "cp",
           "--platform", f"manylinux2014_{machine}", "--platform", f"manylinux_2_17_{machine}",
           "--platform", f"manylinux_2_28_{machine}", "--platform", "any",
           "-r", str(tmp / "reqs.in")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NelError(f"cannot download the wheels the image needs ({', '.join(requirements)}): {last}")
    (tmp / "reqs.in").rename(tmp / "requirements.txt")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def source_root() -> Path:
    """The checkout nel runs from (the parent of its packages)."""
    import benchmarks

    return Path(benchmarks.__file__).resolve().parent.parent


def write_context(plan: PackagePlan, context: Path, wheelhouse: Path) -> None:
    """Fill a build context: Dockerfile, wheels, nel's source and the benchmark module."""
    (context / "Dockerfile").write_text(plan.dockerfile(), encoding="utf-8")
    shutil.copytree(wheelhouse, context / "wheels")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for pkg in NEL_PACKAGES:
        shutil.copytree(source_root() / pkg, context / "nel" / pkg, ignore=ignore)
    dest = context / "bench"
    dest.mkdir()
    if plan.module.is_dir():
        shutil.copytree(plan.module, dest / plan.module.name, ignore=ignore)
    else:
        shutil.copy2(plan.module, dest / plan.module.name)
        # Datasets named by a relative path are read next to the module: bring the ones
        # its source names along.
        text = plan.module.read_text(encoding="utf-8", errors="replace")
        for sib in plan.module.parent.iterdir():
            if sib.is_file() and sib.suffix in _DATA_SUFFIXES and re.search(rf"['\"]{re.escape(sib.name)}['\"]", text):
                shutil.copy2(sib, dest / sib.name)


def build(plan: PackagePlan, tag: str, context: Path) -> None:
    """`docker build` the context into `tag`."""
    _docker(["build", "-t", tag, str(context)], what=f"docker build of {tag}")


def push(tag: str) -> None:
    """`docker push` the image."""
    _docker(["push", tag], what=f"docker push of {tag}")
