"""The budget cap of a service (`services.<name>.pricing.max_cost_usd`): what one run has
spent on it, and the check made before each new request.

The spend is counted per process, per service, from the `usage` of the answers received in
this run (a sample kept from the journal or the store cost nothing now). The CLI runs every
shard in its own process, one after another, so one counter sees all of a run's requests;
`reset_budgets` starts a run at zero.

Bound: the check is made when a request is about to start, and at most `max_concurrent`
requests are on the wire at once (the loop's gate, evaluation/loop.py). Once the answers received reach the cap,
no new request starts; the requests already in flight (at most `max_concurrent - 1`) finish
and are kept and counted, so a run spends at most the cap plus that many answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.errors import NelError
from nel_assets.engine.results.cost import Pricing


class BudgetExhausted(NelError):
    """A service's budget cap was reached: the run stopped sending requests (exit 5)."""


@dataclass
class Budget:
    """One service's spending in this run against its cap."""

    service: str
    pricing: Pricing
    spent_usd: float = 0.0
    n_priced: int = 0

    @property
    def cap(self) -> float | None:
        """The cap in US dollars (None: no cap, the cost is only counted)."""
        return self.pricing.max_cost_usd

    @property
    def exhausted(self) -> bool:
        """True once what was received reached the cap."""
        return self.cap is not None and self.spent_usd >= self.cap

    def add(self, row: dict[str, Any]) -> None:
        """Count the cost of one answered row (its `prompt_tokens` / `completion_tokens`)."""
        p, c = row.get("prompt_tokens"), row.get("completion_tokens")
        if p is None and c is None:
            return
        self.spent_usd += self.pricing.cost(float(p or 0), float(c or 0))
        self.n_priced += 1

    def stop_message(self, n_left: int) -> str:
        """The one line a run stopped by this budget reports."""
        return (f"budget reached for service {self.service!r}: ${self.spent_usd:.4f} spent in this run "
                f"(pricing.max_cost_usd ${self.cap:g}); {n_left} sample{'s' if n_left != 1 else ''} "
                "not sent, kept for a rerun (finished samples are not sent again)")


_BUDGETS: dict[str, Budget] = {}


def budget_for(service: str, pricing: Pricing | None) -> Budget | None:
    """The run's budget of `service` when it has a cap (None without one)."""
    if pricing is None or pricing.max_cost_usd is None:
        return None
    b = _BUDGETS.get(service)
    if b is None or b.pricing != pricing:
        b = _BUDGETS[service] = Budget(service, pricing)
    return b


def reset_budgets() -> None:
    """Start a run's spending at zero (the CLI calls this at the start of `nel eval run`)."""
    _BUDGETS.clear()
