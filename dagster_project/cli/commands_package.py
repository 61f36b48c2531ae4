"""`nel package` (a container image serving a BYOB benchmark), `nel cache-sqsh` (an enroot
.sqsh of an image) and `nel export` (bundles to an experiment tracker), with NeMo Evaluator
0.3.0's arguments and exit statuses: 1 when the command cannot do its work (`Error: ...`),
2 for bad flags and for what nel does not support yet (one line naming it).

Only argparse here: the handlers import what they need when they run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

#: NeMo Evaluator's built-in image variants `cache-sqsh` builds from its own Dockerfiles.
SQSH_VARIANTS = ("base", "harbor", "lm-eval", "skills", "gym", "full")


class CommandFailed(Exception):
    """The command cannot do its work: one `Error:` line, exit 1 (as NeMo Evaluator)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `package`, `cache-sqsh` and `export`."""
    p = sub.add_parser("package", help="build a container image that serves a BYOB benchmark",
                       description="Build a Docker image that runs `nel serve` of the benchmark(s) "
                       "a BYOB module registers (port 9090). The image carries nel from this "
                       "checkout and the packages `nel serve` needs, installed from a local "
                       "wheelhouse ($NEL_WHEELHOUSE, filled once with pip), so the build "
                       "itself needs no network. Run it: docker run -p 127.0.0.1:9090:9090 TAG")
    p.add_argument("-m", "--module", required=True,
                   help="the BYOB module: a .py file or a directory (with its data files)")
    p.add_argument("-t", "--tag", required=True, help="image tag, e.g. my-bench:latest")
    p.add_argument("--base-image", default="python:3.11-slim",
                   help="base image with python3 and its venv module (default python:3.11-slim)")
    p.add_argument("--push", action="store_true", help="docker push the image after the build")
    p.add_argument("--requirements", type=_existing_file,
                   help="extra requirements.txt installed into the image")
    p.add_argument("-o", "--output", help="write the Dockerfile here (its build context next to "
                   "it) instead of building")
    p.set_defaults(func=_failing(_cmd_package))

    p = sub.add_parser("cache-sqsh", help="create an enroot .sqsh of an image (SLURM clusters)",
                       description="Import a container image into an enroot squashfs file "
                       "(OUTPUT_PATH/FILENAME) on HOST: locally when HOST is this machine, else "
                       "over ssh. Needs NVIDIA enroot there.")
    p.add_argument("target", metavar="TARGET", help="image reference (NeMo Evaluator's variants "
                   f"{', '.join(SQSH_VARIANTS)} are not built by nel)")
    p.add_argument("host", metavar="HOST", help="where to create the file (localhost = here)")
    p.add_argument("output_path", metavar="OUTPUT_PATH", help="directory for the .sqsh file")
    p.add_argument("-r", "--registry", default="nvcr.io/nvidia/nemo-evaluator",
                   help="registry for the built-in variants (not used by nel yet)")
    p.add_argument("-t", "--tag", default="local", help="tag for the built-in variants (not used by nel yet)")
    p.add_argument("-f", "--filename", help="output file name (default: from TARGET)")
    p.set_defaults(func=_failing(_cmd_cache_sqsh))

    p = sub.add_parser("export", help="export result bundles to an experiment tracker",
                       description="Send eval-*.json bundles to an exporter (every_eval_ever, inspect, mlflow, wandb).")
    p.add_argument("paths", nargs="+", type=_existing_path, metavar="PATHS",
                   help="run directories or eval-*.json bundle files")
    p.add_argument("-d", "--dest", required=True, help="exporter name (every_eval_ever, inspect, mlflow, wandb)")
    p.add_argument("-o", "--override", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="exporter setting (values parsed as JSON when possible)")
    p.add_argument("-c", "--config", type=_existing_file, help="exporter settings (YAML or JSON)")
    p.add_argument("--output-dir", help="output directory passed to the exporter")
    p.set_defaults(func=_failing(_cmd_export))


def _existing_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"file {text!r} does not exist")
    return text


def _existing_path(text: str) -> str:
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"path {text!r} does not exist")
    return text


def _failing(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args) or 0)
        except CommandFailed as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 1
    return run


def _cmd_package(args: argparse.Namespace) -> int:
    import tempfile

    from benchmarks.errors import NelError
    from nel_resources.images import container_image as ci

    if not Path(args.module).exists():
        raise CommandFailed(f"Module path not found: {args.module}")
    plan = ci.plan_package(args.module, args.base_image, args.requirements)
    try:
        version, machine = ci.base_python(args.base_image)
        wheels = ci.ensure_wheelhouse(plan.requirements, version, machine)
        if args.output:
            dockerfile = Path(args.output).resolve()
            context = dockerfile.parent / f"{dockerfile.name}.context"
            if context.exists():
                raise CommandFailed(f"{context} exists: remove it or choose another --output")
            context.mkdir(parents=True)
            ci.write_context(plan, context, wheels)
            (context / "Dockerfile").rename(dockerfile)
            print(f"Dockerfile written to {dockerfile} (build: docker build -f {dockerfile} {context})")
            return 0
        with tempfile.TemporaryDirectory(prefix="nel_package_") as tmp:
            ci.write_context(plan, Path(tmp), wheels)
            print(f"Building image: {args.tag} (serves {', '.join(plan.benchmarks)})", flush=True)
            ci.build(plan, args.tag, Path(tmp))
        print(f"Image built: {args.tag}")
        print(f"Run it: docker run --rm -p 127.0.0.1:{ci.PORT}:{ci.PORT} {args.tag}")
        if args.push:
            print(f"Pushing: {args.tag}", flush=True)
            ci.push(args.tag)
            print(f"Pushed: {args.tag}")
    except ci.ToolMissing:
        raise
    except NelError as exc:  # docker or pip could not do it: NeMo Evaluator's status 1
        raise CommandFailed(str(exc)) from None
    return 0


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def _is_local(host: str) -> bool:
    import socket

    return host in _LOCAL_HOSTS or host in {socket.gethostname(), socket.getfqdn()}


def _cmd_cache_sqsh(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import subprocess

    from benchmarks.errors import NelError

    if args.target in SQSH_VARIANTS:
        raise NelError(f"cache-sqsh {args.target}: building NeMo Evaluator's own image variants "
                       f"({', '.join(SQSH_VARIANTS)}) is not supported yet in nel; give an image "
                       "reference (e.g. one `nel package` built)")
    filename = args.filename or args.target.replace("/", "-").replace(":", "-") + ".sqsh"
    sqsh = f"{args.output_path.rstrip('/')}/{filename}"
    install = ("install NVIDIA enroot (https://github.com/NVIDIA/enroot: its enroot .deb/.rpm "
               "from the releases page)")
    if _is_local(args.host):
        enroot = shutil.which("enroot")
        if enroot is None:
            raise NelError(f"cache-sqsh needs enroot, which is not installed on this machine: {install}")
        if Path(sqsh).exists():
            # a cache: the file stays until the user removes it (enroot would refuse to
            # overwrite it anyway, "File already exists")
            print(f"{sqsh} is already there (remove it to import {args.target} again)")
            print(f"\nDone. Use in config:\n  image: {sqsh}\n")
            return 0
        # An image the local Docker engine has is read from it (dockerd://), others from a registry.
        local = shutil.which("docker") and subprocess.run(
            ["docker", "image", "inspect", args.target], capture_output=True).returncode == 0
        uri = args.target if "://" in args.target else f"{'dockerd' if local else 'docker'}://{args.target}"
        Path(args.output_path).mkdir(parents=True, exist_ok=True)
        cmd = [enroot, "import", "-o", sqsh, "--", uri]
        print(f"  $ {shlex.join(cmd)}", flush=True)
        if subprocess.run(cmd).returncode != 0:
            raise CommandFailed(f"enroot import of {args.target} failed (see its output above)")
    else:
        probe = subprocess.run(["ssh", args.host, "command -v enroot"], capture_output=True, text=True)
        if probe.returncode == 255:
            raise CommandFailed(f"cannot reach {args.host} over ssh: {probe.stderr.strip()}")
        if probe.returncode != 0:
            raise NelError(f"cache-sqsh needs enroot, which is not installed on {args.host}: {install}")
        uri = args.target if "://" in args.target else f"docker://{args.target}"
        remote = (f"mkdir -p {shlex.quote(args.output_path)} && "
                  f"enroot import -o {shlex.quote(sqsh)} -- {shlex.quote(uri)}")
        print(f"  $ ssh {args.host} {remote}", flush=True)
        if subprocess.run(["ssh", args.host, remote]).returncode != 0:
            raise CommandFailed(f"enroot import of {args.target} on {args.host} failed (see its output above)")
    print(f"\nDone. Use in config:\n  image: {sqsh}\n")
    return 0


def _bundle_paths(paths: list[str]) -> list[Path]:
    """eval-*.json bundles in the given files and directories (nel's output dirs keep them
    in <bench>/, or <bench>/models/<model>/<bench>/ with several models, so directories are
    searched at any depth)."""
    found: list[Path] = []
    for text in paths:
        p = Path(text)
        found += sorted(p.rglob("eval-*.json")) if p.is_dir() else [p]
    return found


def _cmd_export(args: argparse.Namespace) -> int:
    import json

    from benchmarks.errors import NelError

    bundles = _bundle_paths(args.paths)
    if not bundles:
        raise CommandFailed("No eval-*.json bundle files found under the given PATHS. "
                            "Pass a run directory or bundle file directly.")
    settings: dict[str, Any] = {}
    if args.config:
        import yaml

        loaded = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise CommandFailed(f"Config file {args.config} must hold a mapping at the top level.")
        inner = loaded.get(args.dest)
        settings.update(inner if isinstance(inner, dict) else loaded)
    for token in args.overrides:
        key, sep, value = token.partition("=")
        if not sep or not key.strip():
            raise NelError(f"-o/--override {token!r}: write KEY=VALUE (e.g. -o tracking_uri=http://...)")
        try:
            settings[key.strip()] = json.loads(value)
        except ValueError:
            settings[key.strip()] = value
    from nel_resources.exporters import EXPORTERS, KNOWN_EXPORTERS, is_built

    if args.dest not in KNOWN_EXPORTERS:
        raise CommandFailed(f"Unknown exporter {args.dest!r}. Available: {', '.join(KNOWN_EXPORTERS)}")
    if not is_built(args.dest):
        raise NelError(f"exporter {args.dest} is not supported yet in nel")
    try:
        return int(EXPORTERS.load(args.dest)(bundles, settings, args.output_dir) or 0)
    except NelError as exc:  # a bundle it cannot export: the command cannot do its work
        raise CommandFailed(str(exc)) from None
