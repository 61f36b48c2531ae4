"""What an OpenClaw run said and did: its JSON result, its transcript, its ATIF steps.

`openclaw agent --json` prints one JSON document on stdout: `{"payloads": [{"text": ...}],
"meta": {"agentMeta": {"usage": ...}}}` when the turn ended, `{"ok": false, "error":
{"message": ...}}` when it failed. The answer is the text of its payloads.

The trajectory comes from two records. The capture proxy saw every model call (the
messages sent, the answer with its tool calls, tokens, latency, status): those are the
steps (`captured_steps`). OpenClaw's own transcript (its agent database,
`~/.openclaw/agents/main/agent/openclaw-agent.sqlite`, table `transcript_events`: one JSON
event per row, the session JSONL of older releases) adds what only the agent knows about
its tools: exit code, duration, whether the call failed. Tool call ids differ between the
two (OpenClaw rewrites them for the provider), so results are paired in the order they
were made. The steps then take the shape of nel's own tool loop (`tool_steps`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["answer_text", "error_text", "parse_result", "tool_steps", "transcript_tool_results",
           "usage"]

_DECODER = json.JSONDecoder()
# Bounded scans: a result is found in at most this much of the tail of stdout.
_MAX_SCAN = 4_000_000


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The JSON result document of `openclaw agent --json`, or None when there is none.

    stdout normally holds only the document; anything printed before it (a plugin's
    banner) is skipped: the last top-level object that parses is taken.
    """
    text = stdout[-_MAX_SCAN:].strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else None
    except json.JSONDecodeError:
        pass
    # Documents start on a line of their own: try each such start, last first.
    start = len(text)
    while True:
        start = text.rfind("\n{", 0, start)
        if start < 0:
            return None
        try:
            doc, _ = _DECODER.raw_decode(text, start + 1)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            return doc


def answer_text(doc: dict[str, Any]) -> str:
    """The visible answer: the texts of the result's payloads, joined."""
    payloads = doc.get("payloads")
    if not isinstance(payloads, list):
        return ""
    return "\n".join(str(p["text"]).strip() for p in payloads
                     if isinstance(p, dict) and isinstance(p.get("text"), str)
                     and p["text"].strip())


def error_text(doc: dict[str, Any] | None, stderr: str) -> str:
    """Why a run failed: the result's error message, else stderr's last meaningful line."""
    if doc is not None:
        err = doc.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str) and err:
            return err
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    reasons = [ln for ln in lines if "Reason:" in ln]
    return (reasons or lines or ["no output"])[-1][:500]


def usage(doc: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt tokens, completion tokens) the result reports, summed over its model calls."""
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    agent = meta.get("agentMeta") if isinstance(meta.get("agentMeta"), dict) else {}
    u = agent.get("usage") if isinstance(agent.get("usage"), dict) else {}

    def num(key: str) -> int | None:
        v = u.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return num("input"), num("output")


def transcript_tool_results(state_dir: Path, session_id: str) -> list[dict[str, Any]]:
    """The tool results OpenClaw recorded for a session, in order (empty when none).

    Each is `{"tool_name", "exit_code", "latency_ms", "is_error", "status"}`. The database is
    opened read-only after the agent has exited; rows stored compressed (large events) are
    skipped: they carry big outputs, whose text the captured traffic already has.
    """
    db = state_dir / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    if not db.is_file():
        return []
    out: list[dict[str, Any]] = []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            rows = con.execute("SELECT event_json FROM transcript_events WHERE session_id = ? "
                               "AND event_json IS NOT NULL ORDER BY seq", (session_id,)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []  # a schema this release does not have: the traffic alone tells the story
    for (raw,) in rows:
        try:
            event = json.loads(raw)
        except (TypeError, json.JSONDecodeError):
            continue
        msg = event.get("message") if isinstance(event, dict) else None
        if not isinstance(msg, dict) or msg.get("role") != "toolResult":
            continue
        details = msg.get("details") if isinstance(msg.get("details"), dict) else {}
        out.append({"tool_name": msg.get("toolName"), "exit_code": details.get("exitCode"),
                    "latency_ms": details.get("durationMs"), "is_error": bool(msg.get("isError")),
                    "status": details.get("status")})
    return out


def tool_steps(steps: list[dict[str, Any]], results: list[dict[str, Any]]
               ) -> tuple[list[dict[str, Any]], int]:
    """The captured steps in the shape nel's own tool loop records, with OpenClaw's details.

    `captured_steps` hangs each tool result on the agent step that called it; here each
    becomes a `system` step of its own after that agent step, with `extra` naming the tool,
    the turn, the exit code and duration OpenClaw recorded, and `error` for a failed call
    (`exec failed with exit code 2`), so the bundle's failure analysis and the README's
    queries read OpenClaw runs as they read `tool_calling` ones. Results pair with
    OpenClaw's in order. Returns the steps (renumbered from 1) and the number of tool calls.
    """
    pending = iter(results)
    out: list[dict[str, Any]] = []
    n_calls = 0
    for step in steps:
        out.append(step)
        if step.get("source") != "agent":
            continue
        calls = step.get("tool_calls") or []
        n_calls += len(calls)
        names = {c.get("tool_call_id"): c.get("function_name") for c in calls}
        turn = (step.get("extra") or {}).get("turn")
        for k, res in enumerate((step.pop("observation", None) or {}).get("results") or []):
            detail = next(pending, None) or {}
            name = detail.get("tool_name") or names.get(res.get("source_call_id")) or (
                calls[k].get("function_name") if k < len(calls) else None)
            code = detail.get("exit_code")
            error = None
            if detail.get("is_error") or (isinstance(code, int) and code):
                error = f"exit code {code}" if isinstance(code, int) and code else "tool error"
            content = str(res.get("content") or "")
            out.append({"source": "system", "message": content,
                        "observation": {"results": [{
                            "source_call_id": res.get("source_call_id"), "content": content,
                            "is_error": error is not None}]},
                        "extra": {"turn": turn, "function_name": name, "exit_code": code,
                                  "latency_ms": detail.get("latency_ms"), "error": error}})
    for i, step in enumerate(out, start=1):
        step["step_id"] = i
    return out, max(n_calls, len(results))
