"""Run a Skills code answer as evalplus does: the problem's prompt, then the completion Skills
extracts (`preprocess_code`), then the problem's tests and `check(entry_point)`, in the
benchmark's sandbox through nel's code harness (a pass needs the harness's sentinel)."""

from __future__ import annotations

from typing import Any

from benchmarks._types import VerifyResult
from benchmarks.scoring.code import PYTHON_CMD, ExecSandbox, harness_input, judge_run, new_sentinel
from benchmarks.skills.graders import code_completion


async def run_completion(response: str, row: dict[str, Any], sandbox: ExecSandbox, *,
                         timeout: float) -> VerifyResult:
    """Score one code answer against a prepared HumanEval(+) row."""
    ext = code_completion(response)
    details: dict[str, Any] = {"method": ext.method, "source": "content", "grader": "skills_evalplus"}
    if not ext.completion.strip():
        return VerifyResult(0.0, None, {**details, "reason": "no_code"})
    prompt, entry = str(row["prompt"]), str(row["entry_point"])
    # evalplus's solution for a sample with a `completion`: prompt + completion, verbatim.
    answer = prompt + ext.completion
    sentinel = new_sentinel()
    stdin = harness_input(prompt=prompt, answer=answer, tests=str(row["test"]),
                          entry_point=entry, sentinel=sentinel)
    res = await sandbox.exec(PYTHON_CMD, timeout_sec=timeout, stdin=stdin)
    stopped = getattr(res, "stopped", None)
    verdict = judge_run(res.return_code, stopped, res.stderr or "", stdout=res.stdout or "",
                        sentinel=sentinel)
    details.update(reason=verdict.reason, return_code=res.return_code)
    if stopped:
        details["stopped"] = stopped
    if not verdict.passed:
        details["stderr_tail"] = (res.stderr or "")[-1000:]
    return VerifyResult(1.0 if verdict.passed else 0.0, ext.completion, details)
