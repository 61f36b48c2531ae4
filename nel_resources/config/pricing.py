"""`services.<name>.pricing:` what a service's tokens cost, and an optional spending cap.

NeMo Evaluator 0.3.0 has no config key for prices (its `RuntimeStats.cost` is computed from
`price_per_1k_*` fields no config sets), so the spelling is nel's own: prices per million
tokens, as API providers list them, in US dollars.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from nel_resources.config._base import _Strict, key_error


class PricingConfig(_Strict):
    """Prices of one service's tokens (US dollars per million) and its budget cap.

    `max_cost_usd` caps what one `nel eval run` spends on this service's requests: when the
    cost of the answers received reaches it, no new request is sent (those in flight
    finish and are kept), the unfinished shards stay in their journals and the run exits 5;
    a rerun (with a higher cap, or the same one: the cap counts what each run sends)
    continues without resending a finished sample.
    """

    input_per_million: float = Field(0.0, ge=0.0)
    output_per_million: float = Field(0.0, ge=0.0)
    max_cost_usd: float | None = Field(None, gt=0.0)

    @model_validator(mode="after")
    def _cap_needs_a_price(self) -> PricingConfig:
        if self.max_cost_usd is not None and not (self.input_per_million or self.output_per_million):
            raise key_error("max_cost_usd", "a budget cap needs a price: set `input_per_million` "
                            "or `output_per_million` (US dollars per million tokens)")
        return self

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        """The cost in US dollars of `prompt_tokens` in and `completion_tokens` out."""
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6
