"""What `nel eval run` checks, before any request, of an agent benchmark (terminal-bench,
SWE-bench, `harbor://`, PinchBench).

A Harbor-format benchmark runs when the task's own verifier runs in the task's sandbox
(`benchmarks.agentic.harbor_verifier`) after the agent's work: an agent that works in it
(`tool_calling` with `sandbox_tools: true`, the `harbor` solver), or one that works elsewhere
and hands back a patch nel applies there (`gym_delegation`, `tool_calling` with only a Gym
`resource_service`), in a `docker` sandbox (the task's image), a `slurm` one (the task's
image through Pyxis in the sandbox's allocation), an `apptainer` one (the task's image as a
SIF; on a node pool its commands are steps of an allocation on the pool's partition), an
`ecs_fargate` one (a Fargate task per sample: agent_ecs_images) or a `local` one (this
machine's tools). `gym_delegation` with `trust_reward: true` takes Gym's reward and needs no
sandbox. Everything else is refused in one line naming the key: another solver (`simple`: no
agent), no sandbox for a verifier that needs one, another sandbox type (nel makes the
verifier's /tests and /logs only in these), a task image the local Docker engine does not
have for a docker sandbox (nothing is pulled; Pyxis and Apptainer take the image from where
the cluster does). PinchBench (graded by its automated checks
and an LLM judge on the workspace the agent leaves) runs with `tool_calling` and
`sandbox_tools: true`, whose sandbox workdir is the workspace.
"""

from __future__ import annotations

from typing import Any

#: Sandbox types a Harbor task runs in (the verifier's scratch mounts exist in these).
HARBOR_SANDBOXES = ("docker", "slurm", "apptainer", "local", "ecs_fargate")
#: Of those, the types that run each task in its own image from the config checks' view (an
#: ecs_fargate one checks its images itself: agent_ecs_images).
_IMAGE_SANDBOXES = ("docker", "slurm", "apptainer")
#: Of those, the types whose every command is a process tree of its own that ends with it
#: (an srun step; an `apptainer exec` in its own PID namespace): nothing runs between commands.
_COMMAND_SCOPED_SANDBOXES = ("slurm", "apptainer")
#: Sandbox types PinchBench's workspace is graded in.
_PINCHBENCH_SANDBOXES = ("docker", "local", "ecs_fargate")
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
    from benchmarks import get_factory
    from nel_resources.config import ConfigError

    i = cfg.benchmarks.index(bench)

    def refuse(key: str, why: str) -> ConfigError:
        line = cfg.line_of("benchmarks", i, *key.split("."))
        return ConfigError(f"{cfg._where}:{line or '?'}: key benchmarks.{i}.{key}: {why}")

    solver = bench.solver
    if getattr(get_factory(bench.name), "task_format", None) == "pinchbench":
        _check_pinchbench(bench, refuse)
        _load_tasks(bench)  # its task files (and judge prompt) are here
        return
    in_sandbox = solver.type == "harbor" or (solver.type == "tool_calling" and solver.sandbox_tools)
    # The agent works elsewhere (Gym's agent, Gym's tools); its patch comes back to the task's
    # sandbox (nel_assets.engine.solvers.agent_patch), or Gym's own reward is taken.
    outside = solver.type == "gym_delegation" or (solver.type == "tool_calling"
                                                  and bool(solver.resource_service))
    if not (in_sandbox or outside):
        raise refuse("solver", f"{bench.name!r} is an agent benchmark (Harbor tasks): nel runs it "
                               "with `solver: {type: tool_calling, sandbox_tools: true}`, "
                               "`{type: tool_calling, resource_service: <gym>}`, "
                               "`{type: gym_delegation, ...}` or `{type: harbor, agent: "
                               f"terminus-2}}`; the {solver.type} solver is not supported yet in "
                               "nel for these tasks")
    from nel_resources.agent_sandbox import effective_sandbox

    trusted = solver.type == "gym_delegation" and solver.trust_reward
    sandbox = effective_sandbox(bench)  # none named: nel provides a docker one (agent_sandbox)
    if sandbox is None or sandbox.type == "none":
        if trusted:  # Gym's reward needs no sandbox; the task files must still be here
            _load_tasks(bench)
        if trusted or in_sandbox:
            return  # in_sandbox: the sandbox check refuses it, with its own line
        # `type: none` written out: NeMo Evaluator 0.3.0 scores every such task 0 (its Harbor
        # verify has nowhere to run the tests); nel refuses it instead.
        raise refuse("sandbox", f"{bench.name!r}: the task's tests run in a sandbox (the "
                                "agent's patch is applied there): use `sandbox: {type: docker}` "
                                "(each task brings its image), or set `trust_reward: true` on a "
                                "gym_delegation solver")
    if sandbox.type not in HARBOR_SANDBOXES:
        raise refuse("sandbox", f"{bench.name!r}: Harbor tasks run in a docker, slurm, "
                                "apptainer, ecs_fargate or local sandbox in nel; a "
                                f"{sandbox.type} sandbox is not supported yet in nel for them")
    if solver.type == "harbor" and str(solver.agent).startswith("terminus") \
            and sandbox.type in _COMMAND_SCOPED_SANDBOXES:
        raise refuse("solver.agent", f"{solver.agent} drives a tmux session that must outlive "
                                     f"each command, and a {sandbox.type} sandbox ends every "
                                     "command's processes with it (one srun step or apptainer "
                                     "exec each): use a docker or local sandbox for it, or an "
                                     "agent that works in one command (openhands, ...)")
    env = _load_tasks(bench)
    if sandbox.type == "ecs_fargate":  # task images: prebuilt, or built by CodeBuild
        from dagster_project.agent_ecs_images import check_ecs_task_images

        return check_ecs_task_images(bench, sandbox, env, refuse)
    if env is None:
        return
    if sandbox.type not in _IMAGE_SANDBOXES:
        return

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
    if sandbox.type != "docker":
        return  # Pyxis (enroot import) and `apptainer build` fetch the image as the cluster does
    from nel_resources.checks.deferred import defer
    from nel_resources.images.harness_image import missing_image_reason

    names = sorted(images)
    shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
    if defer("docker", f"{bench.name!r}: its task images ({shown}) are in the local Docker "
                       "engine (nel never pulls)"):
        return  # the engine is asked by the run only
    for image, first in images.items():
        why = missing_image_reason(image)
        if why is not None:
            raise refuse("sandbox", f"{bench.name!r} (task {first}): {why}")


def _check_pinchbench(bench: Any, refuse: Any) -> None:
    """PinchBench is graded on the workspace the agent leaves (benchmarks.agentic.
    pinchbench_grading): the agent must work in the sample's sandbox, whose workdir is it."""
    solver, sandbox = bench.solver, bench.sandbox
    # OpenClaw in the sandbox (NeMo Evaluator's way): its workspace is the sandbox's workdir
    in_sandbox = solver.type == "openclaw" and sandbox is not None and sandbox.type != "none"
    if not in_sandbox and (solver.type != "tool_calling" or not solver.sandbox_tools):
        raise refuse("solver", f"{bench.name!r} is graded on the agent's workspace in the sample's "
                               f"sandbox; the {solver.type} solver works in a workspace of its "
                               "own, which is not supported yet in nel for these tasks: use "
                               "`solver: {type: tool_calling, sandbox_tools: true}`")
    if sandbox is not None and sandbox.type not in ("none", *_PINCHBENCH_SANDBOXES):
        raise refuse("sandbox", f"{bench.name!r}: its workspace is a docker, local or "
                                f"ecs_fargate sandbox in nel; a {sandbox.type} sandbox is not "
                                "supported yet in nel for it")


def _load_tasks(bench: Any) -> Any | None:
    """The benchmark's environment (its task files read); None when they are not here and a
    dry run lists that as a check the run makes (the run refuses with DataMissingError)."""
    from benchmarks import get_benchmark
    from benchmarks.errors import DataMissingError
    from nel_resources.checks.deferred import external, has_deferred

    try:
        return get_benchmark(bench.name, **bench.params)
    except DataMissingError as exc:
        if not has_deferred("data", repr(bench.name)):  # once: the name's own check said it
            external("data", exc)
        return None
