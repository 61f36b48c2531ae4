"""The bundle's cost block, hand-computed, and the report lines that show it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from nel_assets.engine.reports.cost_text import cost_line, run_cost_line, usd
from nel_assets.engine.results.cost import bundle_cost
from nel_resources.config.pricing import PricingConfig


def _table() -> pa.Table:
    return pa.table({"prompt_tokens": pa.array([100, 250, None, 50], pa.int64()),
                     "completion_tokens": pa.array([10, 40, None, 0], pa.int64()),
                     "reward": pa.array([1.0, 0.0, None, 1.0])})


def test_cost_per_run_and_per_correct_answer_by_hand() -> None:
    c = bundle_cost(_table(), PricingConfig(input_per_million=3.0, output_per_million=15.0))
    assert c is not None
    # 400 prompt tokens x $3/M = $0.0012; 50 completion tokens x $15/M = $0.00075
    assert c["prompt_tokens"] == 400 and c["completion_tokens"] == 50
    assert c["prompt_cost"] == pytest.approx(0.0012)
    assert c["completion_cost"] == pytest.approx(0.00075)
    assert c["total_cost"] == pytest.approx(0.00195)
    assert c["correct"] == 2 and c["per_correct"] == pytest.approx(0.000975)
    assert c["n_priced"] == 3 and c["n_unpriced"] == 1  # the failed request reported no usage
    assert c["currency"] == "USD"
    line = cost_line({"cost": c})
    assert line is not None and line.startswith("Cost: $0.00195 (400 prompt tokens at $3/M, 50 completion")
    assert "$0.000975 per correct answer" in line and "1 samples without reported usage" in line
    assert run_cost_line([{"cost": c}, {"cost": c}, {}]) == (
        "Total cost: $0.0039 over 2 priced results; $0.000975 per correct answer")


def test_no_pricing_no_cost_and_nothing_correct() -> None:
    assert bundle_cost(_table(), None) is None
    assert cost_line({}) is None and run_cost_line([{}]) is None
    t = _table().set_column(2, "reward", pa.array([0.0, 0.0, None, 0.0]))
    c = bundle_cost(t, PricingConfig(input_per_million=1.0))
    assert c is not None and c["per_correct"] is None and c["completion_cost"] == 0.0
    assert "no correct answer" in (cost_line({"cost": c}) or "")
    assert usd(1234.5) == "$1,234.50" and usd(0.0) == "$0" and usd(None) == "n/a"


def test_pricing_config_is_validated() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a budget cap needs a price"):
        PricingConfig(max_cost_usd=1.0)
    with pytest.raises(ValidationError):
        PricingConfig(input_per_million=-1.0)
    with pytest.raises(ValidationError):
        PricingConfig(input_per_million=1.0, max_cost_usd=0)
    assert PricingConfig(output_per_million=2.0).cost(1_000_000, 500_000) == pytest.approx(1.0)
