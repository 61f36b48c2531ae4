"""Which solver a run uses, built from its `solver:` block: None for `simple` (the loop's own
single request), a `ToolCallingSolver` for `tool_calling` with its tool sources.

`tool_sources_for` is the one place tool sources are chosen: `sandbox_tools: true` gives the
sandbox tools, `resource_service:` a NeMo Gym resource server's tools (`gym_tools`), both
combined when both are set (the solver routes calls by tool name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.errors import NelError
from nel_assets.engine.solvers.base import Solver, ToolSource
from nel_resources.config import SandboxConfig, SolverConfig
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
        name = solver_cfg.resource_service
        svc = services.get(name)
        url = svc if isinstance(svc, str) else getattr(svc, "url", None)
        if not url:
            known = ", ".join(sorted(services)) or "none defined"
            raise NelError(f"solver.resource_service {name!r} is not a service with a `url` "
                           f"(services: {known})")
        from nel_assets.engine.solvers.gym_tools import GymResourceTools  # type: ignore[import-not-found]

        sources.append(GymResourceTools(str(url), timeout=solver_cfg.tool_timeout,
                                        max_output_chars=solver_cfg.max_output_chars))
    return sources


def solver_for(solver_cfg: SolverConfig, client: ModelClient, *, system_prompt: str | None,
               services: Mapping[str, Any], sandbox: SandboxConfig | None = None) -> Solver | None:
    """The solver a shard runs with, or None for `simple` (the loop's single request).

    Raises:
        NelError: a solver type nel cannot run, or a tool source that cannot be had.
    """
    if solver_cfg.type == "simple":
        return None
    if solver_cfg.type == "tool_calling":
        from nel_assets.engine.solvers.tool_calling import ToolCallingSolver

        return ToolCallingSolver(
            client, tool_sources_for(solver_cfg, services, sandbox=sandbox),
            max_turns=solver_cfg.max_turns, system_prompt=system_prompt,
            tool_timeout=solver_cfg.tool_timeout, max_output_chars=solver_cfg.max_output_chars,
            response_mode=solver_cfg.response_mode,
            artifact_cmd=sandbox.capture_cmd if sandbox is not None else None)
    raise NelError(f"the {solver_cfg.type!r} solver is not supported yet in nel")
