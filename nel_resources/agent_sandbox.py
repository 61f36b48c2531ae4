"""The sandbox nel provides for a Harbor task whose agent works outside any sandbox.

NeMo Evaluator's walkthrough 09 writes `gym_delegation` (without `trust_reward`) and
`tool_calling` with only Gym tools (`resource_service`) on agent benchmarks with no
`sandbox:` at all: the evaluator is to provide the sandbox the task's tests run in. NeMo
Evaluator 0.3.0 provides none and scores every such task 0 (its Harbor verify finds no
sandbox). nel gives such a benchmark a `docker` sandbox: each task names its own image
(task.toml `[environment] docker_image`, else its Dockerfile's `FROM`), and the block has
nel's defaults (no network, limits). A benchmark that names a sandbox keeps it, and an
explicit `type: none` stays none (then refused in one line unless Gym's reward is trusted).

The `openclaw` solver in a `docker` sandbox runs Node inside it, whose V8 isolates (one per
worker thread) reserve more address space than the sandbox's default 4 GB per-process data
limit allows (a worker died with "Failed to reserve virtual memory for CodeRange"): a block
that sets no `memory` gets `OPENCLAW_MEMORY` (the container's real use is far lower).
"""

from __future__ import annotations

from nel_resources.config import BenchmarkConfig, SandboxConfig

__all__ = ["OPENCLAW_MEMORY", "agent_works_outside", "effective_sandbox"]

#: A docker sandbox's `memory` for OpenClaw when the block sets none (module docstring).
OPENCLAW_MEMORY = "8g"


def agent_works_outside(bench: BenchmarkConfig) -> bool:
    """Whether the benchmark's agent works outside the task's sandbox and nel verifies its
    patch there (a Gym agent or Gym's tools; not when Gym's reward is trusted)."""
    solver = bench.solver
    if solver.type == "gym_delegation":
        return not solver.trust_reward
    return solver.type == "tool_calling" and bool(solver.resource_service) and not solver.sandbox_tools


def effective_sandbox(bench: BenchmarkConfig) -> SandboxConfig | None:
    """The benchmark's sandbox block, or the `docker` one nel provides (module docstring)."""
    sb = bench.sandbox
    if (sb is not None and bench.solver.type == "openclaw" and sb.type == "docker"
            and sb.memory is None):
        return sb.model_copy(update={"memory": OPENCLAW_MEMORY})
    if sb is not None or not agent_works_outside(bench):
        return sb
    from benchmarks import get_factory
    from benchmarks.errors import NelError

    try:
        harbor = getattr(get_factory(bench.name), "task_format", None) == "harbor"
    except NelError:  # an unknown name is refused elsewhere, with suggestions
        return None
    return SandboxConfig(type="docker") if harbor else None
