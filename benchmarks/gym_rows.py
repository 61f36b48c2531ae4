"""NeMo Gym's native `/verify` protocol: its JSONL rows as problems, and the bodies nel sends.

A NeMo Gym resources server validates `/verify` against its `BaseVerifyRequest`: the
problem's `responses_create_params`, the answer as a Responses-API object (`response`), and
per-item fields at the top level (`expected_answer`, `verifier_metadata`, ...). The problems
come either from a Gym JSONL file (`data=rows.jsonl`) or, as NeMo Evaluator 0.3.0 does when
no file is given, from the server's own `/seed_session` (a `nel serve` environment server
serves its problems; a real Gym resources server holds none and has no `/dataset_size`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks._types import SeedResult
from benchmarks.errors import NelError

__all__ = ["ROW_KEY", "gym_response", "load_gym_rows", "native_body", "row_generation_keys",
           "row_seed"]

# The seed metadata key that carries a problem's index from seed() to verify().
ROW_KEY = "gym_row"
# Row fields never copied into seed metadata: the bulky request, the answer (it has its own
# field), and names that would collide with verify()'s own parameters.
_NOT_METADATA = frozenset({"responses_create_params", "expected_answer", "response",
                           "expected", "reasoning", "self", ROW_KEY})
# Seed metadata that is the eval loop's bookkeeping, not the verifier's (0.3.0's `_INTERNAL`).
_INTERNAL = frozenset({"source", "benchmark", "problem_idx", "prompt", "verifier_metadata"})

# `responses_create_params` keys that are the prompt (or tools, which are refused); any
# other key is a generation setting.
_ROW_PROMPT_KEYS = frozenset({"input", "instructions", "tools"})


def row_generation_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The generation settings (keys of `responses_create_params` other than the prompt)
    that any row sets: nel sends the service's own settings instead of these."""
    keys: set[str] = set()
    for row in rows:
        keys.update(k for k in row["responses_create_params"] if k not in _ROW_PROMPT_KEYS)
    return sorted(keys)


def _content_text(content: Any) -> str:
    """The text of a Responses-API message `content` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content
            if isinstance(part, dict) and part.get("type", "input_text")
            in ("input_text", "output_text", "text")
        )
    return ""


def load_gym_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a NeMo Gym JSONL file, checked for what nel can run.

    Each row needs `responses_create_params.input` (a string or a list of messages).
    Rows that declare tools are refused: they need a Gym agent to run the tool calls, and
    nel sends one prompt and scores one answer.

    Raises:
        NelError: naming the file and line, for a missing file, a line that is not a JSON
            object, a row without input, or a row with tools.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise NelError(f"gym data {file}: cannot read it ({exc.strerror or exc})") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"gym data {file}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise NelError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise NelError(f"{where}: expected a JSON object, got {type(row).__name__}")
        rcp = row.get("responses_create_params")
        if not isinstance(rcp, dict) or not isinstance(rcp.get("input"), str | list):
            raise NelError(f"{where}: needs responses_create_params.input (a string or messages)")
        if rcp.get("tools"):
            raise NelError(
                f"{where}: the row declares tools, which need a NeMo Gym agent to run; "
                "nel sends one prompt per row"
            )
        rows.append(row)
    if not rows:
        raise NelError(f"gym data {file}: no rows")
    return rows


def row_seed(row: Mapping[str, Any], idx: int) -> SeedResult:
    """A data row as a problem: its input messages, expected answer and scalar fields."""
    raw = row["responses_create_params"]["input"]
    messages: list[dict[str, Any]] = []
    for item in [{"role": "user", "content": raw}] if isinstance(raw, str) else raw:
        # function-call items and the like are tool traffic, not prompt text
        if isinstance(item, dict) and "role" in item and item.get("type", "message") == "message":
            role = "system" if item["role"] == "developer" else str(item["role"])
            messages.append({"role": role, "content": _content_text(item.get("content"))})
    instructions = row["responses_create_params"].get("instructions")
    if isinstance(instructions, str) and instructions:
        # the Responses API's system prompt
        messages.insert(0, {"role": "system", "content": instructions})
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    expected = row.get("expected_answer")
    verifier = row.get("verifier_metadata")
    if expected is None and isinstance(verifier, dict):
        expected = verifier.get("expected_answer")
    metadata: dict[str, Any] = {
        k: v for k, v in row.items()
        if k not in _NOT_METADATA and (v is None or isinstance(v, str | int | float | bool))
    }
    metadata[ROW_KEY] = idx
    return SeedResult(
        prompt=prompt,
        expected_answer="" if expected is None else str(expected),
        metadata=metadata,
        messages=messages or None,
    )


def gym_response(text: str, reasoning: str | None) -> dict[str, Any]:
    """An answer as the Responses-API object NeMo Gym's `NeMoGymResponse` validates."""
    output: list[dict[str, Any]] = []
    if reasoning:
        output.append({"id": "rs_nel", "type": "reasoning",
                       "summary": [{"type": "summary_text", "text": reasoning}]})
    output.append({
        "id": "msg_nel", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
    return {
        "id": "resp_nel", "object": "response", "created_at": int(time.time()),
        "model": "nel", "status": "completed", "output": output,
        # required by OpenAI's Response type, which Gym servers validate the body against
        "parallel_tool_calls": False, "tool_choice": "none", "tools": [],
    }


def native_body(seed: SeedResult, response: str, expected: str, reasoning: str | None,
                metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The native `/verify` body of a problem the server seeded (no rows file), as NeMo
    Evaluator 0.3.0 builds it: the prompt as `responses_create_params`, the seed metadata
    as `verifier_metadata` and at the top level. Unlike 0.3.0 it also sends
    `expected_answer` (0.3.0 drops it, so a server cannot score the answer) and the seed's
    `metadata` object, which `nel serve` passes to its scorer."""
    messages = seed.messages or [{"role": "user", "content": seed.prompt}]
    meta = {k: v for k, v in metadata.items() if k not in (ROW_KEY, "reasoning")}
    body: dict[str, Any] = {
        "responses_create_params": {"input": [dict(m) for m in messages], "model": "evaluator"},
        "response": gym_response(response, reasoning),
        "expected_answer": expected,
        "verifier_metadata": {k: v for k, v in meta.items() if k not in _INTERNAL},
        "metadata": meta,
    }
    for key, value in meta.items():
        body.setdefault(key, value)
    return body
