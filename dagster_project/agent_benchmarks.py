"""What `nel eval run` checks, before any request, of an agent benchmark (terminal-bench,
SWE-bench, `harbor://`, PinchBench).

A Harbor-format benchmark runs when an agent works in the task's sandbox and the task's own
verifier then runs there (`benchmarks.agentic.harbor_verifier`): that is nel's
`tool_calling` solver with `sandbox_tools: true`, or the `harbor` solver (a Harbor agent), in a
`docker` sandbox (the task's image) or a
`local` one (this machine's tools). Everything else is refused in one line naming the key:
another solver (its agent does not work in the sandbox the tests run in), another sandbox
type (nel mounts the verifier's /tests and /logs only in these two), a task image the local
Docker engine does not have (nothing is pulled), and PinchBench, whose grading (an LLM judge
and automated checks of the agent's workspace) is not built.
"""

from __future__ import annotations

from typing import Any

#: Sandbox types a Harbor task runs in (the verifier's scratch mounts exist in these).
HARBOR_SANDBOXES = ("docker", "local")
#: Dockerfile instructions nel honours without building (the image, the workdir).
_NO_BUILD = frozenset({"FROM", "WORKDIR", "ARG", "LABEL", "MAINTAINER"})


def build_steps(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions that change the image beyond its base (RUN, COPY, ...)."""
    found: list[str] = []
    continued = False
    for raw in dockerfile.splitlines():
        line = raw.strip()
        was_continued, continued = continued, line.endswith("\\")
        if was_continued or not line or line.startswith("#"):
            continue
        word = line.split(maxsplit=1)[0].upper()
        if word not in _NO_BUILD and word not in found:
            found.append(word)
    return found


def check_agent_benchmark(cfg: Any, bench: Any) -> None:
    """Refuse, in one line naming the key, an agent benchmark nel cannot run as configured.

    Raises:
        ConfigError: the benchmark, its solver, its sandbox or a task's image cannot run.
        DataMissingError: its task files are not here (one line naming where nel looked).
    """
    from benchmarks import get_benchmark, get_factory
    from nel_resources.config import ConfigError

    i = cfg.benchmarks.index(bench)

    def refuse(key: str, why: str) -> ConfigError:
        line = cfg.line_of("benchmarks", i, *key.split("."))
        return ConfigError(f"{cfg._where}:{line or '?'}: key benchmarks.{i}.{key}: {why}")

    if getattr(get_factory(bench.name), "task_format", None) != "harbor":
        raise refuse("name", f"{bench.name!r} is an agent benchmark whose grading (an LLM judge "
                             "and automated checks of the agent's workspace) is not supported yet "
                             "in nel; remove it from this run")
    solver = bench.solver
    if solver.type == "harbor":
        pass  # a Harbor agent works in the sample's sandbox, as the tests need
    elif solver.type != "tool_calling" or not solver.sandbox_tools:
        raise refuse("solver", f"{bench.name!r} is an agent benchmark (Harbor tasks): nel runs it "
                               "with `solver: {type: tool_calling, sandbox_tools: true}` or "
                               "`{type: harbor, agent: terminus-2}`, whose agent works in the "
                               "sandbox the task's tests then run in; "
                               f"the {solver.type} solver without it is not supported yet in nel "
                               "for these tasks")
    sandbox = bench.sandbox
    if sandbox is None or sandbox.type == "none":
        return  # refused by the sandbox check, with its own line
    if sandbox.type not in HARBOR_SANDBOXES:
        raise refuse("sandbox", f"{bench.name!r}: Harbor tasks run in a docker or local sandbox "
                                f"in nel; a {sandbox.type} sandbox is not supported yet in nel "
                                "for them")
    from benchmarks.errors import DataMissingError
    from nel_resources.checks.deferred import external, has_deferred

    try:
        env = get_benchmark(bench.name, **bench.params)
    except DataMissingError as exc:  # a dry run plans without the task files and says so
        if not has_deferred("data", repr(bench.name)):  # (once: the name's own check said it)
            external("data", exc)
        return
    if sandbox.type != "docker":
        return
    from nel_resources.images.harness_image import missing_image_reason

    images: dict[str, str] = {}
    for task in env.tasks:  # type: ignore[attr-defined]
        steps = build_steps(task.dockerfile)
        if steps and not (task.config.get("environment") or {}).get("docker_image"):
            raise refuse("name", f"task {task.name} of {bench.name!r}: its environment/Dockerfile "
                                 f"has build steps ({', '.join(steps)}) and nel does not build "
                                 f"task images yet: `docker build -t <tag> {task.path}/environment` "
                                 "and set `[environment] docker_image = \"<tag>\"` in its task.toml")
        image = task.docker_image or sandbox.image
        if not image:
            raise refuse("sandbox", f"task {task.name} of {bench.name!r} names no image (task.toml "
                                    "[environment] docker_image, or environment/Dockerfile's FROM) "
                                    "and the sandbox sets no `image:`")
        images.setdefault(image, task.name)
    from nel_resources.checks.deferred import defer

    names = sorted(images)
    shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
    if defer("docker", f"{bench.name!r}: its task images ({shown}) are in the local Docker "
                       "engine (nel never pulls)"):
        return  # the engine is asked by the run only
    for image, first in images.items():
        why = missing_image_reason(image)
        if why is not None:
            raise refuse("sandbox", f"{bench.name!r} (task {first}): {why}")
