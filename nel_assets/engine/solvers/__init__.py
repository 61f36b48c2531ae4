"""Solvers: how a seeded problem becomes a model answer (NeMo Evaluator's `Solver` interface).

Only the `simple` solver is built: one chat or completion request per problem
(`ChatSolver`, `CompletionSolver`). The others NeMo Evaluator has (tool calling, gym
delegation, harbor, openclaw, container) are refused until the issues that build them land.
"""

from nel_assets.engine.solvers.simple import ChatSolver, CompletionSolver, Solver, SolveResult

__all__ = ["ChatSolver", "CompletionSolver", "SolveResult", "Solver"]
