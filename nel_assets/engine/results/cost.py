"""The cost of a (benchmark, model)'s requests from their token counts and the service's
prices (`services.<name>.pricing`): per run, per correct answer.

Tokens are the `usage` the model server reported per sample (`prompt_tokens`,
`completion_tokens`); a sample whose server reported none is counted in `n_unpriced`, not as
free. The 0.3.0 keys (`prompt_cost`, `completion_cost`, `total_cost`, `currency`) are the
ones its `RuntimeStats.cost` writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa


class Pricing(Protocol):
    """A service's prices (its `pricing` block, `nel_resources.config.pricing.PricingConfig`)."""

    input_per_million: float
    output_per_million: float
    max_cost_usd: float | None

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        """US dollars for these tokens."""
        ...


def bundle_cost(table: pa.Table, pricing: Pricing | None) -> dict[str, Any] | None:
    """The bundle's `cost` block, or None when the service has no pricing.

    `per_correct` is the total cost over the sum of the scored samples' rewards (for 0/1
    scores: the number of correct answers); None when nothing was right.
    """
    if pricing is None:
        return None
    import numpy as np

    from nel_assets.engine.results.bundle import _floats

    prompt = _floats(table, "prompt_tokens")
    comp = _floats(table, "completion_tokens")
    reward = _floats(table, "reward")
    priced = ~(np.isnan(prompt) & np.isnan(comp))
    p_tok = float(np.nansum(prompt[priced])) if priced.any() else 0.0
    c_tok = float(np.nansum(comp[priced])) if priced.any() else 0.0
    p_cost = p_tok * pricing.input_per_million / 1e6
    c_cost = c_tok * pricing.output_per_million / 1e6
    total = p_cost + c_cost
    correct = float(np.nansum(reward)) if reward.size else 0.0
    return {"currency": "USD", "prompt_cost": p_cost, "completion_cost": c_cost, "total_cost": total,
            "per_correct": total / correct if correct > 0 else None, "correct": correct,
            "prompt_tokens": p_tok, "completion_tokens": c_tok,
            "n_priced": int(priced.sum()), "n_unpriced": int((~priced).sum()),
            "input_per_million": pricing.input_per_million,
            "output_per_million": pricing.output_per_million}
