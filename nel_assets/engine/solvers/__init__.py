"""Solvers: how a seeded problem becomes a model answer (NeMo Evaluator's `Solver` interface).

Only the `simple` solver is built: one chat or completion request per problem
(`ChatSolver`, `CompletionSolver`). The others NeMo Evaluator has (tool calling, gym
delegation, harbor, openclaw, container) are refused until the issues that build them land.
"""

from nel_assets.engine.solvers.base import (
    SolveContext,
    Solver,
    SolveResult,
    ToolOutcome,
    ToolSource,
)
from nel_assets.engine.solvers.simple import ChatSolver, CompletionSolver

__all__ = ["ChatSolver", "CompletionSolver", "SolveContext", "SolveResult", "Solver",
           "ToolOutcome", "ToolSource"]
