"""Which grader a `type: judge` metric written in NeMo Evaluator's spelling uses.

An entry in NeMo Evaluator's spelling (the model under `solver.service`) means NeMo
Evaluator's grading: its judge metrics get `params.kind: nemo` when they name no kind, and
the grader (nel_assets.engine.evaluation.judging) reads `nemo` as 0.3.0's rubric judge
(`benchmarks.judge_rubric`) for a benchmark 0.3.0 grades with it (simpleqa, a BYOB file),
or the benchmark's own grader where 0.3.0 has one (healthbench). Like the headline rule
(nel_resources.config.headline), the choice is written into the entry when it is read, so a
config dumped and read again in nel's spelling (the CLI's `-O` pass, remote shards) grades
the same way. nel's graders stay available under their names: `params: {kind: simpleqa}`.
"""

from __future__ import annotations

from typing import Any

#: The `params.kind` a NeMo-spelled judge metric gets.
NEMO_KIND = "nemo"


def with_nemo_judges(scoring: Any) -> Any:
    """`scoring` (a raw mapping) with `params.kind: nemo` on each judge metric naming no kind
    (a copy; other inputs are returned as they are)."""
    if not isinstance(scoring, dict) or not isinstance(scoring.get("metrics"), list):
        return scoring
    metrics = []
    for m in scoring["metrics"]:
        if isinstance(m, dict) and m.get("type") == "judge":
            params = m.get("params")
            if params is None or (isinstance(params, dict) and "kind" not in params):
                m = {**m, "params": {**(params or {}), "kind": NEMO_KIND}}
        metrics.append(m)
    return {**scoring, "metrics": metrics}
