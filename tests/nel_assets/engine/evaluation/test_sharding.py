"""Sharding: contiguous blocks that cover every problem once, and shard identity from env."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.sharding import select_problems, shard_bounds, shard_from_env


@given(st.integers(0, 5000), st.integers(1, 64))
def test_shards_partition_the_problems(n: int, total: int) -> None:
    seen: list[int] = []
    for s in range(total):
        lo, hi = shard_bounds(n, s, total)
        seen.extend(range(lo, hi))
        assert hi - lo in (n // total, n // total + 1)
    assert seen == list(range(n))


def test_select_problems() -> None:
    assert select_problems(10, max_problems=3) == [0, 1, 2]
    assert select_problems(10, problem_range=(4, 8), max_problems=2) == [4, 5]
    assert select_problems(10, problem_range=(8, 100)) == [8, 9]
    with pytest.raises(NelError, match="empty"):
        select_problems(10, problem_range=(10, 12))


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({"NEL_SHARD_IDX": "2", "NEL_TOTAL_SHARDS": "4"}, (2, 4)),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, (1, 3)),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "4"}, (1, 3)),
    ({"JOB_COMPLETION_INDEX": "0", "NEL_TOTAL_SHARDS": "2"}, (0, 2)),
])
def test_shard_from_env(env: dict[str, str], expected: tuple[int, int] | None) -> None:
    assert shard_from_env(env) == expected


def test_shard_from_env_errors() -> None:
    with pytest.raises(NelError, match="NEL_TOTAL_SHARDS"):
        shard_from_env({"NEL_SHARD_IDX": "1"})
    with pytest.raises(NelError, match="outside"):
        shard_from_env({"NEL_SHARD_IDX": "4", "NEL_TOTAL_SHARDS": "4"})
    assert shard_from_env({"JOB_COMPLETION_INDEX": "1"}, default_total=2) == (1, 2)
