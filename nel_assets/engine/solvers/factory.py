"""Which solver a run uses, built from its `solver:` block: None for `simple` (the loop's own
single request), a `ToolCallingSolver` for `tool_calling` with its tool sources, a
`GymDelegationSolver` for `gym_delegation` (a NeMo Gym agent runs each rollout), an
`OpenClawSolver` for `openclaw` (the OpenClaw CLI agent, through nel's capture proxy), a
`HarborSolver` for `harbor` (a Harbor agent in the sample's sandbox, through the same proxy).

`tool_sources_for` is the one place tool sources are chosen: `sandbox_tools: true` gives the
sandbox tools, `resource_service:` a NeMo Gym resource server's tools (`gym_tools`), both
combined when both are set (the solver routes calls by tool name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.errors import NelError
from benchmarks.registries import Registry
from benchmarks.uri_schemes import is_uri
from nel_assets.engine.solvers.base import Solver, ToolSource
from nel_resources.config import SandboxConfig, ServiceConfig, SolverConfig
from nel_resources.model_client import ModelClient


def tool_sources_for(solver_cfg: SolverConfig, services: Mapping[str, Any], *,
                     sandbox: SandboxConfig | None = None) -> list[ToolSource]:
    """The tool sources of a `tool_calling` solver block.

    Args:
        solver_cfg: The benchmark's `solver:` block.
        services: Service name -> its base URL (str) or a config with `url`, for
            `resource_service`.
        sandbox: The benchmark's sandbox block (`sandbox_tools` needs a real one).

    Raises:
        NelError: a source that cannot be had (no sandbox, an unknown service), one line.
    """
    sources: list[ToolSource] = []
    if solver_cfg.sandbox_tools:
        if sandbox is None or sandbox.type == "none":
            raise NelError("solver.sandbox_tools: true needs a sandbox on the benchmark: add "
                           "`sandbox: {type: local}` (or `{type: docker, image: ...}`)")
        from nel_assets.engine.solvers.sandbox_tools import SandboxTools

        sources.append(SandboxTools(timeout=solver_cfg.tool_timeout))
    if solver_cfg.resource_service:
        url = _service_url(services, solver_cfg.resource_service, "resource_service")
        from nel_assets.engine.solvers.gym_tools import GymResourceTools

        sources.append(GymResourceTools(str(url), timeout=solver_cfg.tool_timeout,
                                        max_output_chars=solver_cfg.max_output_chars))
    return sources


def _service_url(services: Mapping[str, Any], name: str, key: str) -> str:
    svc = services.get(name)
    url = svc if isinstance(svc, str) else getattr(svc, "url", None)
    if not url:
        known = ", ".join(sorted(services)) or "none defined"
        raise NelError(f"solver.{key} {name!r} is not a service with a `url` (services: {known})")
    return str(url)


@dataclass(frozen=True, slots=True)
class SolverInputs:
    """What a solver's builder may use besides its `solver:` block (see `solver_for`)."""

    client: ModelClient
    system_prompt: str | None
    services: Mapping[str, Any]
    sandbox: SandboxConfig | None = None
    timeout: float | None = None
    model_id: str | None = None
    service: ServiceConfig | None = None
    env: Any = None  # the benchmark environment (`loglikelihood` reads its items' options)


SolverBuilder = Callable[[SolverConfig, SolverInputs], Solver | None]


def _simple(cfg: SolverConfig, inp: SolverInputs) -> Solver | None:
    if is_uri(str(getattr(inp.env, "name", "")), "lm-eval"):
        # lm-eval's requests (its generation fields, log-likelihoods): its own solver
        from nel_assets.engine.solvers.lm_eval import LmEvalSolver

        return LmEvalSolver(inp.client, inp.env, inp.system_prompt,
                            f"the service at {inp.client.base_url}")
    return None  # the loop's own single request


def _gym_delegation(cfg: SolverConfig, inp: SolverInputs) -> Solver | None:
    from nel_assets.engine.solvers.gym_delegation import DEFAULT_RUN_TIMEOUT, GymDelegationSolver

    gym_url = _service_url(inp.services, str(cfg.gym_service), "gym_service")
    return GymDelegationSolver(
        gym_url, gym_agent=cfg.gym_agent, trust_reward=cfg.trust_reward,
        model_id=inp.model_id or str(getattr(inp.client, "model", None) or ""),
        timeout=inp.timeout or DEFAULT_RUN_TIMEOUT)


def _tool_calling(cfg: SolverConfig, inp: SolverInputs) -> Solver | None:
    from nel_assets.engine.solvers.tool_calling import ToolCallingSolver

    return ToolCallingSolver(
        inp.client, tool_sources_for(cfg, inp.services, sandbox=inp.sandbox),
        max_turns=cfg.max_turns, system_prompt=inp.system_prompt,
        tool_timeout=cfg.tool_timeout, max_output_chars=cfg.max_output_chars,
        response_mode=cfg.response_mode, image_detail=cfg.image_detail,
        artifact_cmd=inp.sandbox.capture_cmd if inp.sandbox is not None else None)


def _openclaw(cfg: SolverConfig, inp: SolverInputs) -> Solver | None:
    from nel_assets.engine.solvers.openclaw import DEFAULT_TIMEOUT, OpenClawSolver

    if inp.service is None:
        raise NelError("the 'openclaw' solver needs the model service (solver_for(service=))")
    return OpenClawSolver(
        inp.service, openclaw_bin=cfg.openclaw_bin, thinking=cfg.thinking,
        timeout=inp.timeout or DEFAULT_TIMEOUT, max_concurrent=cfg.max_concurrent,
        context_window=cfg.context_window, idle_timeout_seconds=cfg.idle_timeout_seconds,
        system_prompt=inp.system_prompt, model_id=inp.model_id or "",
        web_search_provider=cfg.web_search_provider, config_path=cfg.config_path,
        sandbox_type=(inp.sandbox.type if inp.sandbox is not None and inp.sandbox.type != "none"
                      else None))


def _harbor(cfg: SolverConfig, inp: SolverInputs) -> Solver | None:
    from nel_assets.engine.solvers.harbor_agent import HarborSolver

    if inp.service is None:
        raise NelError("the 'harbor' solver needs the model service (solver_for(service=))")
    return HarborSolver(
        inp.service, agent=str(cfg.agent), agent_kwargs=cfg.agent_kwargs,
        container_env=cfg.container_env, run_timeout=cfg.run_timeout or inp.timeout,
        cmd_timeout=cfg.cmd_timeout, timeout_strategy=cfg.timeout_strategy,
        max_agent_timeout=cfg.max_agent_timeout, skill=cfg.skill, skill_dir=cfg.skill_dir,
        harbor_bin=cfg.harbor_bin, model_id=inp.model_id or "")


# Solver type -> its builder, `(solver block, SolverInputs) -> Solver | None`. A new solver is
# its own module with a builder plus one line here. (`container` runs a harness image for a
# whole shard: `evaluate` hands it to `solvers.container_shard`, not through this table.)
SOLVERS: Registry[SolverBuilder] = Registry("solver", {
    "simple": f"{__name__}:_simple",
    "gym_delegation": f"{__name__}:_gym_delegation",
    "tool_calling": f"{__name__}:_tool_calling",
    "openclaw": f"{__name__}:_openclaw",
    "harbor": f"{__name__}:_harbor",
    "majority_vote": "nel_assets.engine.solvers.majority_vote:build",
    "loglikelihood": "nel_assets.engine.solvers.loglikelihood:build",
})


def solver_for(solver_cfg: SolverConfig, client: ModelClient, *, system_prompt: str | None,
               services: Mapping[str, Any], sandbox: SandboxConfig | None = None,
               timeout: float | None = None, model_id: str | None = None,
               service: ServiceConfig | None = None, env: Any = None) -> Solver | None:
    """The solver a shard runs with, or None for `simple` (the loop's single request).

    Args:
        solver_cfg: The benchmark's `solver:` block.
        client: The run's model client (`gym_delegation` only names its model: the Gym agent
            calls the model server configured in Gym).
        system_prompt: The run's system prompt (`tool_calling`).
        services: Service name -> its base URL or a config with `url`: the
            `resource_service` of `tool_calling`, the `gym_service` of `gym_delegation`.
        sandbox: The benchmark's sandbox block.
        timeout: The benchmark's `timeout`: a `gym_delegation` rollout's limit (default an
            hour, as NeMo Evaluator 0.3.0).
        model_id: The model under test as trajectories name it.
        service: The model service with its effective URL (`openclaw` puts its capture
            proxy in front of it).
        env: The benchmark environment (`loglikelihood` scores its items' options).

    Raises:
        NelError: a solver type nel cannot run, or a tool source or service that cannot be had.
    """
    if solver_cfg.type not in SOLVERS:
        raise NelError(f"the {solver_cfg.type!r} solver is not supported yet in nel")
    build = SOLVERS.load(solver_cfg.type)
    return build(solver_cfg, SolverInputs(client, system_prompt, services, sandbox, timeout,
                                          model_id, service, env))
