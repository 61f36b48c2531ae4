"""A NeMo Gym rollout as ATIF steps: what the agent reports, in the shape nel's own tool loop
records.

A Gym agent answers `/run` with a Responses-API `output` list: `reasoning`, `message` and
`function_call` items from the model, and `function_call_output` items with what the tools
returned. One model turn is a run of model items; each tool result follows it. The steps are
then: the prompt's messages (`system` / `user`), one `agent` step per model turn (its text,
reasoning and `tool_calls`), and one `system` step per tool result with its `observation` —
as NeMo Evaluator's ReAct solver writes them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["gym_output_steps", "gym_output_text"]

_MODEL_ITEMS = frozenset({"message", "function_call", "reasoning"})


def _text(content: Any) -> str:
    """The text of a message `content` (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def gym_output_text(output: list[dict[str, Any]]) -> str:
    """The agent's final answer: the text of its last assistant message ("" when none)."""
    for item in reversed(output):
        if item.get("type") == "message" and item.get("role", "assistant") == "assistant":
            return _text(item.get("content")).strip()
    return ""


def _reasoning(item: dict[str, Any]) -> str:
    parts = item.get("summary") or item.get("content") or []
    return "\n".join(_text([p]) if isinstance(p, dict) else str(p) for p in parts).strip()


def gym_output_steps(body: dict[str, Any], output: list[dict[str, Any]],
                     model_name: str | None) -> list[dict[str, Any]]:
    """ATIF steps (numbered from 1) of a rollout: the prompt of `body` and the agent's `output`."""
    steps: list[dict[str, Any]] = []
    prompt = (body.get("responses_create_params") or {}).get("input") or []
    for msg in [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt:
        if not isinstance(msg, dict) or msg.get("type", "message") != "message":
            continue
        role = msg.get("role")
        source = "system" if role in ("system", "developer") else (
            "agent" if role == "assistant" else "user")
        steps.append({"source": source, "message": _text(msg.get("content"))})
    turn: dict[str, Any] | None = None
    for item in output:
        kind = item.get("type")
        if kind in _MODEL_ITEMS:
            if turn is None:
                turn = {"source": "agent", "message": "", "tool_calls": []}
                if model_name:
                    turn["model_name"] = model_name
                steps.append(turn)
            if kind == "message":
                text = _text(item.get("content"))
                turn["message"] = f"{turn['message']}\n{text}" if turn["message"] else text
            elif kind == "reasoning":
                reasoning = _reasoning(item)
                if reasoning:
                    turn["reasoning_content"] = reasoning
            else:
                turn["tool_calls"].append({
                    "tool_call_id": item.get("call_id") or item.get("id"),
                    "function_name": item.get("name"),
                    "arguments": item.get("arguments"),
                })
        elif kind == "function_call_output":
            turn = None  # what the model says next is a new turn
            result = item.get("output")
            content = result if isinstance(result, str) else _text(result)
            steps.append({"source": "system", "message": content, "observation": {
                "results": [{"source_call_id": item.get("call_id"), "content": content}]}})
    for i, step in enumerate(steps, start=1):
        step["step_id"] = i
    return steps
