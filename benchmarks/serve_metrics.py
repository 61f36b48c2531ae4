"""`POST /aggregate_metrics` of `nel serve`: NeMo Gym's rollout summary, with error bars.

`ng_collect_rollouts` posts every verify response it collected (heavy fields stripped) as
`{verify_responses: [...]}` and expects NeMo Gym's `AggregateMetrics` back:
`{group_level_metrics: [...], agent_metrics: {...}, key_metrics: {...}}`. A resources server
without this route makes it exit 1 after writing all rollouts.

The baseline keys are Gym's (its reward profiler's): `<stat>/<field>` for `stat` in mean,
max, min, median, std and every numeric top-level field of the responses (reward first,
plus the token counts of `response.usage`), per task (`_ng_task_index`) and over all
rollouts; `key_metrics` are the `mean/*` entries, as Gym's default. nel adds what an
evaluation needs (Miller 2024): a standard error computed over tasks (the rollouts of one
task are averaged first, never counted as independent draws), a 95% CI, and the unbiased
pass@k for 0/1 rewards.

Only numpy is used; the whole computation is linear in the number of responses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ROLLOUTS",
    "ROLLOUT_INDEX_KEY",
    "TASK_INDEX_KEY",
    "AggregateInputError",
    "AggregateRefused",
    "AggregateTimeout",
    "TooManyRollouts",
    "aggregate_metrics",
]

# NeMo Gym's names for the task and rollout indices it stamps on every row.
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
_Z95 = 1.959963984540054
_SKIP = frozenset({TASK_INDEX_KEY, ROLLOUT_INDEX_KEY, "response"})
# More rollouts than this in one request are refused (413) before any work: a run of
# 100k tasks x 10 repeats fits; the body limit alone would let ~5M tiny rows through.
MAX_ROLLOUTS = 1_000_000
# Seconds one summary may take (linear: about 1 s per 50k rollouts here).
DEFAULT_TIMEOUT = 60.0
# The deadline is checked every this many rollouts in the per-rollout loops.
_CHECK_EVERY = 4096


class AggregateInputError(ValueError):
    """The request body is not `{verify_responses: [objects with a numeric reward]}`.

    Attributes:
        field: The offending field, for the 422 body.
    """

    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field = field


class AggregateRefused(Exception):
    """A well-formed request that is not summarised; `status` and `code` are for the reply."""

    status = 422
    code = "aggregate_refused"


class TooManyRollouts(AggregateRefused):
    """The request has more than `MAX_ROLLOUTS` verify responses."""

    status = 413
    code = "too_many_rollouts"


class AggregateTimeout(AggregateRefused):
    """The summary was not done within its time limit; the work stopped there."""

    status = 422
    code = "aggregate_timeout"


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise AggregateTimeout("verify_responses: summarising the rollouts took longer than "
                               "the time limit; post them in parts")


def _numeric_fields(item: Mapping[str, Any]) -> dict[str, float]:
    """Top-level numbers of one verify response, plus its `response.usage` counts."""
    out: dict[str, float] = {}
    response = item.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if isinstance(usage, dict):
        for key, value in usage.items():
            if isinstance(value, int | float):
                out[key] = float(value)
    for key, value in item.items():
        if key in _SKIP:
            continue
        if isinstance(value, int | float):  # bool is an int: Gym counts it as 0/1
            out[key] = float(value)
    return out


def _rollout_info(item: Mapping[str, Any], task: int) -> dict[str, Any]:
    """Gym's per-rollout record: its id, indices, reward and numbers (bools as 0/1)."""
    rollout = item.get(ROLLOUT_INDEX_KEY, 0)
    info: dict[str, Any] = {"rollout_id": f"{task}:{rollout}", TASK_INDEX_KEY: task,
                            ROLLOUT_INDEX_KEY: rollout, "reward": item["reward"]}
    response = item.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    for source in (usage if isinstance(usage, dict) else {}, item):
        for key, value in source.items():
            if key not in _SKIP and key != "reward" and isinstance(value, int | float):
                info[key] = int(value) if isinstance(value, bool) else value
    return info


def _describe(values: np.ndarray) -> dict[str, float]:
    """Gym's five baseline statistics of one column (NaNs dropped; empty -> nothing)."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {}
    return {
        "mean": float(values.mean()),
        "max": float(values.max()),
        "min": float(values.min()),
        "median": float(np.median(values)),
        # Gym reports the sample std, and 0 rather than NaN for a single value.
        "std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
    }


def _columns(items: Sequence[dict[str, float]]) -> dict[str, np.ndarray]:
    names: dict[str, None] = {}
    for item in items:
        names.update(dict.fromkeys(item))
    # "reward" first, so the headline keys lead every dict.
    ordered = sorted(names, key=lambda n: (n != "reward", n))
    return {n: np.array([item.get(n, math.nan) for item in items], dtype=float) for n in ordered}


def _group_stats(
    columns: Mapping[str, np.ndarray], order: np.ndarray, starts: np.ndarray
) -> list[dict[str, float]]:
    """`_flat` of every task's rows at once: tasks are runs `starts` of the rows in `order`.

    One sort and a few `reduceat`s per column, however many tasks (a numpy call per task
    made 40,000 single-rollout tasks take seconds). A column absent from a task's rows
    (all NaN there) gives that task no keys for it, as `_describe` does.
    """
    n_groups = starts.size
    sizes = np.diff(np.append(starts, order.size))
    group_of = np.repeat(np.arange(n_groups), sizes)
    stats: list[dict[str, float]] = [{} for _ in range(n_groups)]
    for name, column in columns.items():
        v = column[order]
        valid = ~np.isnan(v)
        count = np.add.reduceat(valid, starts)
        zeroed = np.where(valid, v, 0.0)
        mean = np.add.reduceat(zeroed, starts) / np.maximum(count, 1)
        high = np.maximum.reduceat(np.where(valid, v, -np.inf), starts)
        low = np.minimum.reduceat(np.where(valid, v, np.inf), starts)
        # Two passes, as np.std: squared deviations from each task's own mean.
        deviation = np.where(valid, v - mean[group_of], 0.0)
        squares = np.add.reduceat(deviation * deviation, starts)
        std = np.where(count > 1, np.sqrt(squares / np.maximum(count - 1, 1)), 0.0)
        # Medians: sort each task's values (NaN last within a task), take the middle.
        ranked = v[np.lexsort((v, group_of))]
        lo_mid = starts + (count - 1) // 2
        hi_mid = starts + count // 2
        median = (ranked[np.minimum(lo_mid, v.size - 1)] + ranked[np.minimum(hi_mid, v.size - 1)]) / 2
        rows = zip(count.tolist(), mean.tolist(), high.tolist(), low.tolist(),
                   median.tolist(), std.tolist(), strict=True)
        for out, (c, mu, hi, lo, med, sd) in zip(stats, rows, strict=True):
            if c:
                out[f"mean/{name}"] = mu
                out[f"max/{name}"] = hi
                out[f"min/{name}"] = lo
                out[f"median/{name}"] = med
                out[f"std/{name}"] = sd
    return stats


def _flat(columns: Mapping[str, np.ndarray]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, values in columns.items():
        for stat, value in _describe(values).items():
            out[f"{stat}/{name}"] = value
    return out


def _pass_at_k_all(n: np.ndarray, c: np.ndarray, k_max: int) -> np.ndarray:
    """Unbiased pass@k (Chen et al. 2021) for k = 1..k_max, averaged over tasks.

    Every task has at least `k_max` rollouts. 1 - C(n-c, k) / C(n, k) is a running product
    over i < k (so large n cannot overflow), and one cumulative product along i gives it
    for every k at once: tasks x k_max <= rollouts cells, linear. (Computing each k on its
    own was quadratic: 4,000 rollouts of one task took 105 s.)
    """
    i = np.arange(k_max, dtype=float)
    ratios = np.clip(((n - c)[:, None] - i) / (n[:, None] - i), 0.0, 1.0)
    fail = np.cumprod(ratios, axis=1)
    return (1.0 - fail).mean(axis=0)


def _error_bars(task_ids: np.ndarray, rewards: np.ndarray) -> dict[str, float]:
    """Mean reward with its SE over tasks (repeats averaged first), 95% CI and pass@k."""
    tasks, inverse = np.unique(task_ids, return_inverse=True)
    counts = np.bincount(inverse).astype(float)
    sums = np.bincount(inverse, weights=rewards)
    per_task = sums / counts
    out: dict[str, float] = {"n_tasks": float(tasks.size), "n_rollouts": float(rewards.size)}
    if tasks.size > 1:
        se = float(per_task.std(ddof=1) / math.sqrt(tasks.size))
        mean = float(per_task.mean())
        out.update({"stderr/reward": se, "ci95_low/reward": mean - _Z95 * se,
                    "ci95_high/reward": mean + _Z95 * se})
    if np.isin(rewards, (0.0, 1.0)).all():
        for k, value in enumerate(_pass_at_k_all(counts, sums, int(counts.min())), start=1):
            out[f"pass@{k}/reward"] = float(value)
    return out


def aggregate_metrics(
    body: Mapping[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT
) -> dict[str, Any]:
    """NeMo Gym's `AggregateMetrics` for an `AggregateMetricsRequest` body.

    Linear in the number of rollouts, however they are spread over tasks.

    Args:
        body: `{verify_responses: [{reward, _ng_task_index?, _ng_rollout_index?, ...}]}`;
            a missing task index counts as task 0, as in Gym.
        timeout: Seconds the work may take; it stops there (a server runs this in a thread,
            which cannot be killed, so it checks the time itself). None: no limit.

    Returns:
        `{group_level_metrics, agent_metrics, key_metrics}` (all empty for no responses).

    Raises:
        AggregateInputError: when the body or an item has the wrong shape.
        TooManyRollouts: more than `MAX_ROLLOUTS` responses.
        AggregateTimeout: `timeout` passed first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    responses = body.get("verify_responses")
    if not isinstance(responses, list):
        raise AggregateInputError(
            "verify_responses", f"expected a list, got {type(responses).__name__}"
        )
    if not responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    if len(responses) > MAX_ROLLOUTS:
        raise TooManyRollouts(
            f"verify_responses: {len(responses)} rollouts in one request, more than the "
            f"limit of {MAX_ROLLOUTS}; post them in parts"
        )
    numeric: list[dict[str, float]] = []
    task_ids: list[int] = []
    for i, item in enumerate(responses):
        if i % _CHECK_EVERY == 0:
            _check(deadline)
        field = f"verify_responses[{i}]"
        if not isinstance(item, dict):
            raise AggregateInputError(field, f"expected an object, got {type(item).__name__}")
        reward = item.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(
            reward
        ):
            raise AggregateInputError(f"{field}.reward", "required, a finite number")
        for key in (TASK_INDEX_KEY, ROLLOUT_INDEX_KEY):
            index = item.get(key, 0)
            if isinstance(index, bool) or not isinstance(index, int):
                raise AggregateInputError(f"{field}.{key}", "expected an integer")
        task = item.get(TASK_INDEX_KEY, 0)
        task_ids.append(task)
        numeric.append(_numeric_fields(item))
    ids = np.array(task_ids)
    order = np.argsort(ids, kind="stable")
    starts = np.concatenate(([0], np.flatnonzero(ids[order][1:] != ids[order][:-1]) + 1))
    columns = _columns(numeric)
    _check(deadline)
    stats = _group_stats(columns, order, starts)
    _check(deadline)
    groups: list[dict[str, Any]] = []
    members_of = np.split(order, starts[1:])
    for n_done, (members, group_stats) in enumerate(zip(members_of, stats, strict=True)):
        if n_done % _CHECK_EVERY == 0:
            _check(deadline)
        task = int(ids[members[0]])
        group: dict[str, Any] = {TASK_INDEX_KEY: task}
        group.update(group_stats)  # reward's statistics first, as `_columns` orders them
        # Gym's bookkeeping keys: every rollout posted is one that arrived, and `sample` is
        # the placeholder row Gym's own /aggregate_metrics builds for its single agent.
        group["sample"] = {"agent_ref": {"name": "agent"}}
        group["num_rollouts"] = group["expected_num_rollouts"] = int(members.size)
        group["missing_num_rollouts"] = 0
        group["reward_profile_completion_pct"] = 100.0
        infos = [_rollout_info(responses[j], task) for j in members.tolist()]
        group["rollout_infos"] = sorted(infos, key=lambda r: r[ROLLOUT_INDEX_KEY])
        groups.append(group)
    agent = _flat(columns)
    agent.update(_error_bars(ids, columns["reward"]))
    key = {k: v for k, v in agent.items() if k.startswith("mean/")}
    return {"group_level_metrics": groups, "agent_metrics": agent, "key_metrics": key}
