"""Rows already grouped by question (as a store holds them) take the cheap paths: grouping
without a sort, and maj@k voted a block of questions at a time. Same numbers either way."""

from __future__ import annotations

import numpy as np
import pytest

from nel_assets.engine.stats import at_k
from nel_assets.engine.stats.units import _group


@pytest.mark.parametrize("seed", range(5))
def test_sorted_ids_group_as_np_unique_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for dtype in (np.int64, np.int32):
        pid = np.sort(rng.integers(0, 50, int(rng.integers(1, 400)))).astype(dtype)
        ids, first, inv = np.unique(pid, return_index=True, return_inverse=True)
        got = _group(pid)
        for a, b in zip(got, (ids, inv.reshape(-1), first), strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(6))
def test_maj_at_k_in_blocks_equals_one_block(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    g, reps = int(rng.integers(50, 1500)), int(rng.integers(2, 9))
    pid = np.repeat(np.arange(g) * 3, reps)
    answers = np.array([rng.choice(["1", "2", "3", "", None]) for _ in range(pid.size)], dtype=object)
    if seed % 2:
        answers = np.array([a or "0" for a in answers], dtype=object)  # strings only
    corr = rng.choice([0.0, 1.0, np.nan], pid.size, p=[0.45, 0.45, 0.1])
    rep = np.tile(rng.permutation(reps), g)  # repeats not in row order within a question
    whole = at_k.maj_at_k(pid, answers, corr, [1, 2, reps], repeat=rep)
    monkeypatch.setattr(at_k, "_BLOCK_ROWS", int(rng.integers(1, 40)))
    assert len(at_k._question_blocks(*_group(pid)[1:])) > 1
    assert at_k.maj_at_k(pid, answers, corr, [1, 2, reps], repeat=rep) == whole
    # rows not grouped by question: one block, the same answer as before
    shuffled = rng.permutation(pid.size)
    assert at_k.maj_at_k(pid[shuffled], answers[shuffled], corr[shuffled], [1, 2, reps],
                         repeat=rep[shuffled]) == whole
