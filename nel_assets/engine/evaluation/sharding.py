"""Which problems a shard owns, and which shard this process is (from the scheduler's env)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any

from benchmarks.errors import NelError


def shard_bounds(n: int, shard: int, total: int) -> tuple[int, int]:
    """Contiguous [start, end) block of `n` problems owned by `shard` of `total`.

    Blocks differ in size by at most one, so a merge can check coverage by ranges.
    """
    if total < 1 or not 0 <= shard < total:
        raise NelError(f"shard {shard} is not in 0..{total - 1}")
    base, extra = divmod(n, total)
    start = shard * base + min(shard, extra)
    return start, start + base + (1 if shard < extra else 0)


def select_problems(n: int, *, max_problems: int | None = None,
                    problem_range: tuple[int, int] | None = None,
                    shuffle_seed: int | None = None) -> list[int]:
    """The problem indices of a run, in the order shards slice them.

    With `shuffle_seed` (and no `problem_range`) this is NeMo Evaluator 0.3.0's selection:
    all `n` indices are permuted by `random.Random(shuffle_seed).shuffle`, then the first
    `max_problems` of the permutation are kept (so a sample is spread over the dataset, and
    both tools score the same items). Otherwise (`shuffle_seed` None, or an explicit
    `problem_range`, which wins as in NeMo Evaluator): a range, then its first `max_problems`.
    """
    if shuffle_seed is not None and problem_range is None:
        perm = list(range(n))
        random.Random(shuffle_seed).shuffle(perm)
        return perm if max_problems is None else perm[:max_problems]
    lo, hi = 0, n
    if problem_range is not None:
        lo, hi = max(0, problem_range[0]), min(n, problem_range[1])
        if lo >= hi:
            raise NelError(f"problem range {problem_range[0]}:{problem_range[1]} is empty "
                           f"(the benchmark has {n} problems)")
    if max_problems is not None:
        hi = min(hi, lo + max_problems)
    return list(range(lo, hi))


def shuffle_record(n: int, selected: list[int], *, shuffle_seed: int | None,
                   problem_range: tuple[int, int] | None) -> dict[str, Any]:
    """The `shuffle` block NeMo Evaluator 0.3.0 records in a bundle's config."""
    return {"seed": shuffle_seed, "applied": shuffle_seed is not None and problem_range is None,
            "ds_full_size": n, "ds_effective_size": len(selected)}


def shard_from_env(env: Mapping[str, str] | None = None,
                   default_total: int | None = None) -> tuple[int, int] | None:
    """(shard, total) from NEL_SHARD_IDX/NEL_TOTAL_SHARDS, SLURM array or k8s indexed jobs.

    Returns None when the process is not one shard of a larger run.
    """
    e = os.environ if env is None else env
    pairs = (("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS"),
             ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
             ("JOB_COMPLETION_INDEX", "NEL_TOTAL_SHARDS"))
    for idx_var, total_var in pairs:
        if e.get(idx_var, "") != "":
            total_raw = e.get(total_var) or (str(default_total) if default_total else "")
            if not total_raw:
                raise NelError(f"{idx_var} is set but {total_var} is not: say how many shards there are")
            try:
                idx, total = int(e[idx_var]), int(total_raw)
            except ValueError:
                raise NelError(f"{idx_var}={e[idx_var]!r} / {total_var}={total_raw!r} must be integers") from None
            if idx_var == "SLURM_ARRAY_TASK_ID" and e.get("SLURM_ARRAY_TASK_MIN"):
                idx -= int(e["SLURM_ARRAY_TASK_MIN"])
            if not 0 <= idx < total:
                raise NelError(f"{idx_var}={idx} is outside 0..{total - 1}")
            return idx, total
    return None
