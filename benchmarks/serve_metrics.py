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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ROLLOUT_INDEX_KEY", "TASK_INDEX_KEY", "AggregateInputError", "aggregate_metrics"]

# NeMo Gym's names for the task and rollout indices it stamps on every row.
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
_Z95 = 1.959963984540054
_SKIP = frozenset({TASK_INDEX_KEY, ROLLOUT_INDEX_KEY, "response"})


class AggregateInputError(ValueError):
    """The request body is not `{verify_responses: [objects with a numeric reward]}`.

    Attributes:
        field: The offending field, for the 422 body.
    """

    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field = field


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


def _flat(columns: Mapping[str, np.ndarray]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, values in columns.items():
        for stat, value in _describe(values).items():
            out[f"{stat}/{name}"] = value
    return out


def _pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) averaged over tasks with at least k rollouts."""
    keep = n >= k
    n, c = n[keep], c[keep]
    if n.size == 0:
        return math.nan
    # 1 - C(n-c, k) / C(n, k), as a running product so large n cannot overflow.
    fail = np.ones(n.size)
    for i in range(k):
        fail *= np.clip((n - c - i) / (n - i), 0.0, 1.0)
    return float((1.0 - fail).mean())


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
        correct = sums
        for k in range(1, int(counts.min()) + 1):
            out[f"pass@{k}/reward"] = _pass_at_k(counts, correct, k)
    return out


def aggregate_metrics(body: Mapping[str, Any]) -> dict[str, Any]:
    """NeMo Gym's `AggregateMetrics` for an `AggregateMetricsRequest` body.

    Args:
        body: `{verify_responses: [{reward, _ng_task_index?, _ng_rollout_index?, ...}]}`;
            a missing task index counts as task 0, as in Gym.

    Returns:
        `{group_level_metrics, agent_metrics, key_metrics}` (all empty for no responses).

    Raises:
        AggregateInputError: when the body or an item has the wrong shape.
    """
    responses = body.get("verify_responses")
    if not isinstance(responses, list):
        raise AggregateInputError(
            "verify_responses", f"expected a list, got {type(responses).__name__}"
        )
    if not responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    numeric: list[dict[str, float]] = []
    task_ids: list[int] = []
    for i, item in enumerate(responses):
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
    groups: list[dict[str, Any]] = []
    bounds = np.flatnonzero(np.diff(ids[order])) + 1
    for members in np.split(order, bounds):
        task = int(ids[members[0]])
        group: dict[str, Any] = {TASK_INDEX_KEY: task}
        group.update(_flat(_columns([numeric[j] for j in members])))
        # Gym's bookkeeping keys: every rollout posted is one that arrived, and `sample` is
        # the placeholder row Gym's own /aggregate_metrics builds for its single agent.
        group["sample"] = {"agent_ref": {"name": "agent"}}
        group["num_rollouts"] = group["expected_num_rollouts"] = int(members.size)
        group["missing_num_rollouts"] = 0
        group["reward_profile_completion_pct"] = 100.0
        infos = [_rollout_info(responses[j], task) for j in members]
        group["rollout_infos"] = sorted(infos, key=lambda r: r[ROLLOUT_INDEX_KEY])
        groups.append(group)
    columns = _columns(numeric)
    agent = _flat(columns)
    agent.update(_error_bars(ids, columns["reward"]))
    key = {k: v for k, v in agent.items() if k.startswith("mean/")}
    return {"group_level_metrics": groups, "agent_metrics": agent, "key_metrics": key}
