"""Solvers: how a seeded problem becomes a model answer (NeMo Evaluator's `Solver` interface).

`simple` is one chat or completion request per problem (`ChatSolver`, `CompletionSolver`;
`VLMSolver` is `ChatSolver` under NeMo Evaluator's name for seeds with images);
`tool_calling` (`solvers.tool_calling.ToolCallingSolver`: nel's ReAct loop over sandbox and
NeMo Gym resource-server tools) and `gym_delegation` (`solvers.gym_delegation`: a NeMo Gym
agent runs the rollout) are built from a config by `solvers.factory.solver_for`. The other
types NeMo Evaluator has are refused until the issues that build them land.
"""

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
