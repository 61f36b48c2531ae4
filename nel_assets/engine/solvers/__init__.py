"""Solvers: how a seeded problem becomes a model answer (NeMo Evaluator's `Solver` interface).

`simple` is one chat or completion request per problem (`ChatSolver`, `CompletionSolver`;
`VLMSolver` is `ChatSolver` under NeMo Evaluator's name for seeds with images);
`tool_calling` (`solvers.tool_calling.ToolCallingSolver`: nel's ReAct loop over sandbox and
NeMo Gym resource-server tools) and `gym_delegation` (`solvers.gym_delegation`: a NeMo Gym
agent runs the rollout) are built from a config by `solvers.factory.solver_for`. The other
types NeMo Evaluator has are refused until the issues that build them land.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nel_assets.engine.solvers.base import (
        SolveContext,
        Solver,
        SolveResult,
        ToolOutcome,
        ToolSource,
    )
    from nel_assets.engine.solvers.simple import ChatSolver, CompletionSolver, VLMSolver

__all__ = ["ChatSolver", "CompletionSolver", "SolveContext", "SolveResult", "Solver",
           "ToolOutcome", "ToolSource", "VLMSolver"]

# Imported on first use: the config checks (`solvers.loglikelihood_check`) run on every
# `nel eval run`, and an unchanged rerun must not pay for the eval loop and model client
# that `simple` brings in.
_HOMES = {"SolveContext": "base", "Solver": "base", "SolveResult": "base", "ToolOutcome": "base",
          "ToolSource": "base", "ChatSolver": "simple", "CompletionSolver": "simple",
          "VLMSolver": "simple"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
