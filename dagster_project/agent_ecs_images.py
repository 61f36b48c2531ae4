"""What `nel eval run` checks of a Harbor benchmark in an `ecs_fargate` sandbox: the task
images, before any request.

A task whose `environment/Dockerfile` changes its base (and whose task.toml names no prebuilt
`docker_image`) is built by CodeBuild into the block's `ecr_repository` when its sandbox
starts (nel_resources.sandboxes.ecr_build); every other task runs its own image, which
Fargate pulls from its registry (nothing is asked of a local Docker engine). So:

- a block with `ecr_repository`: the dry run lists the images the run would build (their
  ECR tags) as a check that needs AWS (ECR is asked whether it
  holds them already); the tags are NeMo Evaluator 0.3.0's, so the two share the cache;
- a block without it that finds its infrastructure in SSM: the parameter may hold one (as
  0.3.0 reads it), so that is a check the run makes;
- a block without it and without SSM, whose tasks must be built: refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["check_ecs_task_images"]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")


def check_ecs_task_images(bench: Any, sandbox: Any, env: Any | None,
                          refuse: Callable[[str, str], Exception]) -> None:
    """Check (or, in a dry run, list) the task images of `bench` in its ecs_fargate block.

    Args:
        bench: the benchmark's config entry.
        sandbox: its `ecs_fargate` sandbox block.
        env: its environment (the task files read), or None when they are not here.
        refuse: makes the one-line ConfigError naming a key of the benchmark.

    Raises:
        ConfigError: tasks must be built and the block cannot build them.
    """
    from nel_resources.checks.deferred import defer
    from nel_resources.sandboxes.ecr_build import task_image_tag
    from nel_resources.sandboxes.ssm_discovery import needs_discovery, parameter_name

    tasks = [t for t in getattr(env, "tasks", None) or [] if t.needs_build]
    repo = sandbox.ecr_repository
    if repo:
        if env is None:
            what = "the images of its tasks that must be built"
        elif not tasks:
            return  # every task runs a prebuilt image: nothing to build
        else:
            tags = [task_image_tag(t.path / "environment") for t in tasks]
            what = f"{len(tags)} task image(s) ({_shown(tags)})"
        defer("aws", f"{bench.name!r}: builds {what} by CodeBuild into {repo}, unless ECR holds "
                     "them already")
        return
    if not tasks:
        return
    names = _shown([t.name for t in tasks])
    if needs_discovery(sandbox):
        defer("aws", f"{bench.name!r}: tasks {names} are built by CodeBuild into the "
                     f"`ecr_repository` of SSM parameter {parameter_name(sandbox)}")
        return  # a run without one there stops at the first such sandbox, in one line
    raise refuse("sandbox", f"{bench.name!r}: tasks {names} have build steps in their "
                            "environment/Dockerfile: set the ecs_fargate block's `ecr_repository`, "
                            "`s3_bucket` and `codebuild_service_role` (or `codebuild_project`) "
                            "so nel builds them with CodeBuild")
