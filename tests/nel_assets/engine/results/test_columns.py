"""String columns as codes over their distinct values (`columns.encoded` / `objects`)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nel_assets.engine.results.columns import encoded, objects
from nel_resources.storage.arrow import pa


@pytest.mark.parametrize("dictionary", [False, True])
def test_codes_follow_first_appearance_and_objects_equal_the_values(dictionary: bool) -> None:
    rnd = random.Random(int(dictionary))
    chunks = [[rnd.choice([None, "", "b", "a", "c", "zz"]) for _ in range(rnd.randint(0, 300))] for _ in range(4)]
    arrays = [pa.array(c, type=pa.string()) for c in chunks]
    if dictionary:  # per-file dictionaries in their own orders, as Parquet gives them
        arrays = [a.dictionary_encode() for a in arrays]
    table = pa.table({"x": pa.chunked_array(arrays)})
    flat = [v for c in chunks for v in c]
    codes, values = encoded(table, "x")
    assert values == list(dict.fromkeys(v for v in flat if v is not None))
    assert [None if c < 0 else values[c] for c in codes] == flat
    codes, values = encoded(table, "x", empty_is_null=True)
    assert values == list(dict.fromkeys(v for v in flat if v))
    assert objects(table, "x").tolist() == flat
    assert objects(table, "missing").tolist() == [None] * len(flat)


def test_objects_share_one_str_per_value() -> None:
    table = pa.table({"x": [f"answer {i % 3}" for i in range(3000)]})
    got = objects(table, "x")
    assert len({id(v) for v in got}) == 3
    assert np.array_equal(got, np.asarray(table.column("x").to_pylist(), dtype=object))
