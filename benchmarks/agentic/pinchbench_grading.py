"""PinchBench grading, as NeMo Evaluator 0.3.0 grades it (`benchmarks/pinchbench.py`).

Each task has a `grading_type`:

- `automated`: the task's `grade(transcript, workspace)` (the ```python block of its
  `## Automated Checks`) returns criterion -> score; the reward is their mean (0 when it
  raises, with the error kept);
- `llm_judge`: PinchBench's own judge prompt (`scripts/lib_grading.py:_build_judge_prompt`
  of the checkout, fed a summary of the transcript, the task's `## LLM Judge Rubric`, else its
  `## Grading Criteria`, and the files the agent left in its workspace) goes to the judge
  service; the reply's per-criterion 0-1 scores (or its `total`) give the reward;
- `hybrid`: both, combined by the task's `grading_weights` (default 50/50).

`grade()` and the prompt builder are the dataset's code: nel runs them in the sample's
sandbox, where the agent's workspace is (`pinchbench_runner.py`), never in its own process.
The judge call is nel's judge machinery (`type: judge` metric, kind `pinchbench`): retries,
token accounting and `scoring_details["judge"]` as for every judge. One difference on
purpose: a judge reply nel cannot read is a `judge_error` (reward null), where 0.3.0 gives an
llm_judge task no reward and a hybrid task its automated score alone.

The transcript graded is NeMo Evaluator's fallback for solvers other than OpenClaw: the
agent's final answer as one assistant message.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._types import SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.judges import JudgeParseError, JudgeRequest

__all__ = ["JUDGE_SYSTEM", "PinchBenchJudge", "grade_in_sandbox", "grading_code",
           "parse_fractional"]

JUDGE_SYSTEM = "You are a strict evaluation judge. Always respond with valid JSON."
RUNNER = Path(__file__).with_name("pinchbench_runner.py")
_MARK = "__NEL_PINCHBENCH__="
_CODE = re.compile(r"```python\s*(.*?)\s*```", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
_TOTAL = re.compile(r"(?:total|score)\s*[:=]\s*([0-9]*\.?[0-9]+)", re.IGNORECASE)
_WORK = "/tmp/nel-pinchbench"
# Kill what the agent left running (it could rewrite the runner's files), then a fresh dir.
_RESET = f"kill -9 -1 2>/dev/null; rm -rf {_WORK}; mkdir -p {_WORK}"
_DECODER = json.JSONDecoder()


def grading_code(automated_checks: str | None) -> str:
    """The ```python block of a task's `## Automated Checks` ('' when it has none)."""
    m = _CODE.search(automated_checks or "")
    return m.group(1) if m else ""


def _objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in `text`, left to right (one linear scan)."""
    found, i = [], text.find("{")
    while i >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = text.find("{", end)
    return found


def parse_fractional(text: str) -> dict[str, Any]:
    """A judge reply's per-criterion 0-1 `scores`, `total` (their mean when absent or above
    1, clipped to [0, 1]) and `notes`, read as 0.3.0 reads them. `total` is None when the
    reply holds no score."""
    out: dict[str, Any] = {"scores": {}, "total": None, "notes": ""}
    text = text or ""
    candidates: list[dict[str, Any]] = []
    try:
        whole = json.loads(text.strip())
        candidates = [whole] if isinstance(whole, dict) else []
    except json.JSONDecodeError:
        fence = _FENCE.search(text)
        if fence:
            try:
                obj = json.loads(fence.group(1))
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                candidates.append(obj)
        candidates.extend(_objects(text))
    keys = ("scores", "criteria_scores", "total", "score")
    chosen = next((o for o in reversed(candidates) if any(k in o for k in keys)),
                  candidates[-1] if candidates else None)
    if chosen is not None:
        raw = chosen.get("scores") or chosen.get("criteria_scores") or {}
        for k, v in (raw.items() if isinstance(raw, dict) else ()):
            v = v.get("score") if isinstance(v, dict) else v
            try:
                out["scores"][str(k)] = float(v)
            except (TypeError, ValueError):
                continue
        total = chosen.get("total", chosen.get("score"))
        try:
            out["total"] = float(total) if total is not None else None
        except (TypeError, ValueError):
            out["total"] = None
        out["notes"] = str(chosen.get("notes") or chosen.get("justification") or "")
    else:
        m = _TOTAL.search(text)
        out["total"] = float(m.group(1)) if m else None
    scores = out["scores"]
    if scores and all(0.0 <= v <= 1.0 for v in scores.values()) and (
            out["total"] is None or out["total"] > 1.0):
        out["total"] = sum(scores.values()) / len(scores)
    if out["total"] is not None:
        out["total"] = max(0.0, min(1.0, out["total"]))
    return out


async def grade_in_sandbox(sandbox: Any, task: dict[str, Any], response: str,
                           lib_grading: Path | None) -> VerifyResult:
    """Run the task's automated checks and build its judge prompt in the sample's sandbox.

    Returns the verdict before the judge: an automated task's final reward; for a judge or
    hybrid task, `scoring_details["judge_prompt"]` for the `pinchbench` judge kind.

    Raises:
        NelError: no sandbox, or the sandbox could not run the grader (one line).
    """
    if sandbox is None:
        raise NelError("pinchbench: a task is graded on the agent's workspace, in the sandbox it "
                       "worked in: give the benchmark a `sandbox:`")
    meta, sections = task["meta"], task["sections"]
    kind = str(meta.get("grading_type") or "automated")
    code = grading_code(sections.get("Automated Checks"))
    judged = kind in ("llm_judge", "hybrid")
    transcript = [{"type": "message", "message": {
        "role": "assistant", "content": [{"type": "text", "text": response}]}}]
    workdir = sandbox.spec.workdir
    prep = await sandbox.exec(["sh", "-c", _RESET], timeout_sec=60)
    if prep.return_code != 0:
        raise NelError(f"pinchbench: cannot prepare the grader in the sandbox ({prep.stderr[-200:]})")
    payload = {"grading_code": code, "transcript": transcript, "workspace": workdir,
               "judge": judged, "lib_grading": f"{_WORK}/lib_grading.py",
               "prompt": sections.get("Prompt", ""),
               "expected_behavior": sections.get("Expected Behavior", ""),
               "rubric": sections.get("LLM Judge Rubric") or sections.get("Grading Criteria") or ""}
    with tempfile.TemporaryDirectory(prefix="nel-pinchbench-") as d:
        files = {"in.json": json.dumps(payload), "run.py": RUNNER.read_text(encoding="utf-8")}
        if judged and lib_grading is not None:
            files["lib_grading.py"] = lib_grading.read_text(encoding="utf-8")
        for name, text in files.items():
            (Path(d) / name).write_text(text, encoding="utf-8")
            await sandbox.upload(Path(d) / name, f"{_WORK}/{name}")
    timeout = float(meta.get("timeout_seconds") or 120)
    res = await sandbox.exec(["python3", f"{_WORK}/run.py", f"{_WORK}/in.json"],
                             timeout_sec=timeout, cwd=workdir)
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        raise NelError(f"pinchbench: the grader of task {meta.get('id')} did not finish in the "
                       f"sandbox (exit {res.return_code}, {(res.stderr or res.stdout)[-200:]!r})")
    out = json.loads(line[len(_MARK):])
    details: dict[str, Any] = {"method": "pinchbench", "task_id": meta.get("id"),
                               "grading_type": kind}
    automated: float | None = None
    if code:
        scores = out.get("scores") or {}
        automated = sum(scores.values()) / len(scores) if scores else 0.0
        details.update(automated_score=automated, breakdown=scores)
        if "grade_error" in out:
            details["grade_error"] = out["grade_error"]
    if judged:
        if "judge_prompt" not in out:
            raise NelError(f"pinchbench: task {meta.get('id')}: its judge prompt could not be "
                           f"built: {out.get('judge_error')}")
        details.update(judge_prompt=out["judge_prompt"],
                       grading_weights=meta.get("grading_weights") or None)
        return VerifyResult(automated or 0.0, None, details)
    if automated is None:  # 0.3.0: an automated task without grade() scores 0, with an error
        details["error"] = "no grading_code for automated task"
        automated = 0.0
    return VerifyResult(automated, f"automated={automated:g}", details)


class PinchBenchJudge:
    """The `pinchbench` judge kind: sends the prompt the task's grader built (see
    `grade_in_sandbox`) and turns the reply into the task's reward. It reads the verdict
    before the judge (`reads_verdict`): the prompt and the automated score are there."""

    name = "pinchbench"
    system_prompt = JUDGE_SYSTEM
    reads_verdict = True

    def requests(self, seed: SeedResult, response: str,
                 verdict: VerifyResult | None = None) -> list[JudgeRequest]:
        prompt = (verdict.scoring_details if verdict else {}).get("judge_prompt")
        return [JudgeRequest("pinchbench", prompt)] if prompt else []

    def parse(self, request: JudgeRequest, reply: str) -> dict[str, Any]:
        parsed = parse_fractional(reply)
        if parsed["total"] is None:
            raise JudgeParseError(f"no score in reply {reply[:200]!r}")
        return parsed

    def score(self, seed: SeedResult, grades: dict[str, Any],
              verdict: VerifyResult | None = None) -> tuple[float, dict[str, Any]]:
        details = verdict.scoring_details if verdict else {}
        if "pinchbench" not in grades:  # an automated task: its checks' score stands
            return (float(verdict.reward) if verdict else 0.0), {"grading_type": "automated"}
        judged = grades["pinchbench"]
        total = float(judged["total"])
        if details.get("grading_type") != "hybrid":
            return total, {"grade": f"{total:g}", "scores": judged["scores"], "notes": judged["notes"]}
        w = details.get("grading_weights") or {"automated": 0.5, "llm_judge": 0.5}
        aw, jw = float(w.get("automated", 0.5)), float(w.get("llm_judge", 0.5))
        automated = float(details.get("automated_score") or 0.0)
        combined = (automated * aw + total * jw) / (aw + jw or 1.0)
        return combined, {"grade": f"{combined:g}", "scores": judged["scores"],
                          "notes": judged["notes"], "hybrid_combine": {
                              "automated": automated, "judge": total,
                              "weights": {"automated": aw, "llm_judge": jw},
                              "combined": combined}}
