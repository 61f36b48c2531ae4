"""How a `container://` benchmark fits nel's shard/bundle graph.

The harness is the whole benchmark, so nel seeds no problem of its own: the environment
(`HarnessEnvironment`) has zero problems and a fingerprint made of the image's id, the task
and the params (a rebuilt image or changed params reruns the shard; nothing else does). Its
one shard runs the harness (`run_container_shard`) and commits the per-sample rows the
harness wrote, if any, with the harness's own scores in the shard record; the bundle step
(`harness_bundle_score`) takes the score from those.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from typing import Any

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from nel_assets.engine.solvers.container import (
    DEFAULT_TIMEOUT_S,
    HarnessRun,
    harness_summary,
    parse_name,
    run_harness,
    store_rows,
)
from nel_resources.images.harness_image import image_id

_PROTOCOL_TO_ENDPOINT = {"chat_completions": "chat", "completions": "completions", "responses": "chat"}
_Z95 = 1.959963984540054


class HarnessEnvironment(EvalEnvironment):
    """A `container://image#task` benchmark as nel's graph sees it: no seeded problems."""

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.name = name
        self.image, self.task = parse_name(name)
        self.params = dict(params or {})

    def __len__(self) -> int:
        return 0

    async def seed(self, idx: int) -> SeedResult:
        raise NelError(f"{self.name}: the harness image seeds its own problems")

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        raise NelError(f"{self.name}: the harness image scores its own answers")

    def fingerprint(self) -> str:
        payload = {"image": self.image, "id": image_id(self.image), "task": self.task,
                   "params": self.params}
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode())
        return f"container:{self.task}:{digest.hexdigest()[:16]}"


def harness_run(run: Any, base_url: str | None) -> HarnessRun:
    """The harness invocation of a resolved `RunSpec` (`run`) against its service."""
    svc = run.service.config
    image, task = parse_name(run.benchmark)
    solver = run.solver
    url = base_url or svc.url
    if not url:
        raise NelError(f"{run.benchmark}: the service has no url for the harness to call")
    return HarnessRun(
        image=image, task=task, base_url=url, model_id=svc.model or run.model_id,
        endpoint_type=solver.endpoint_type or _PROTOCOL_TO_ENDPOINT.get(svc.protocol, "chat"),
        params=dict(run.env.params), adapter_config=solver.adapter_config,
        api_key=svc.resolved_api_key(), env_vars=dict(solver.env_vars),
        mounts=dict(solver.mounts), timeout=solver.run_timeout or DEFAULT_TIMEOUT_S)


def run_container_shard(run: Any, base_url: str | None, *, run_id: str
                        ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the harness for (benchmark, model): its result rows and the shard-record summary.

    Raises:
        NelError: one line with the reason when the harness failed (non-zero exit, timeout,
            no or unreadable results file).
    """
    hr = harness_run(run, base_url)
    outcome = asyncio.run(run_harness(hr))
    if outcome.error or outcome.results is None:
        raise NelError(str(outcome.error))
    rows = store_rows(outcome.results, benchmark=run.benchmark, model=run.model,
                      model_id=run.model_id, run_id=run_id)
    return rows, harness_summary(hr.image, hr.task, outcome)


def harness_bundle_score(summary: dict[str, Any]) -> dict[str, Any]:
    """The bundle's `score` from a harness's headline metric (its first one), when nel has
    no per-sample rows to compute it from.

    The SE is the harness's `stats.stderr` when it reported one; the 95% interval is the
    normal one around the value (`ci_method: harness`), cut to [0, 1] for a value in that
    range, else there is no interval.
    """
    scores: dict[str, Any] = summary.get("scores") or {}
    name = next(iter(scores))
    entry = scores[name]
    value = float(entry["value"])
    st = entry.get("stats") or {}
    se = st.get("stderr")
    se = float(se) if isinstance(se, int | float) and math.isfinite(se) else None
    n = int(summary.get("samples") or 0) or None
    lo = hi = None
    if se is not None:
        lo, hi = value - _Z95 * se, value + _Z95 * se
        if 0.0 <= value <= 1.0:  # a rate: the interval stays inside [0, 1]
            lo, hi = max(lo, 0.0), min(hi, 1.0)
    return {
        "mean": value, "se": se, "ci_low": lo, "ci_high": hi,
        "ci_method": "harness" if se is not None else None, "level": 0.95,
        "n_items": n, "n_samples": n, "n_repeats": int(summary.get("repeats") or 1),
        "n_failed_samples": 0, "metric": name, "source": "harness",
    }
