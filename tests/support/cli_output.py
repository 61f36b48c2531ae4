"""Assertions on what `nel` prints when something fails: one `error:` line per failure,
no traceback, no Dagster log line."""

from __future__ import annotations

import re

# Dagster's console logger: "2026-01-01 12:00:00 +0000 - dagster - ERROR - job - run - ...".
_DAGSTER_LINE = re.compile(r" - dagster - |RUN_FAILURE|STEP_FAILURE|DagsterExecution|Stack Trace:")


def error_lines(stdout: str, stderr: str) -> list[str]:
    """The `error:` lines of stderr, after checking that nothing else failure-like leaked:
    no traceback and no Dagster log line anywhere, and stderr holds only `error:` and
    `warning:` lines."""
    text = stdout + stderr
    assert "Traceback" not in text, f"a traceback reached the terminal:\n{text}"
    leaked = [ln for ln in text.splitlines() if _DAGSTER_LINE.search(ln)]
    assert not leaked, "Dagster log lines reached the terminal:\n" + "\n".join(leaked)
    other = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("error:", "warning:"))]
    assert not other, "stderr has lines that are neither error: nor warning::\n" + "\n".join(other)
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]
