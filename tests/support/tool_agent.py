"""A small tool-calling agent, run as its own process: what an external harness does.

    python -m tests.support.tool_agent BASE_URL SESSION QUESTION [FOLLOW_UP ...]

It talks OpenAI chat completions over httpx to `BASE_URL/s/SESSION/v1` (nel's proxy names
the session by that prefix; `-`: BASE_URL itself), offering one tool, `add(a, b)`. While the model answers with
tool calls it runs them and sends the results back (tool messages); then it asks each
follow-up question in the same conversation. The first turn forces the tool
(`tool_choice`), which llama.cpp honours with a grammar. It prints the final conversation
as JSON on stdout, and exits 1 on any HTTP error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]
MAX_TOOL_ROUNDS = 3


def _add(arguments: str) -> str:
    try:
        args = json.loads(arguments)
        return str(int(args["a"]) + int(args["b"]))
    except (ValueError, KeyError, TypeError) as exc:  # the model's arguments were not usable
        return f"error: {type(exc).__name__}: {exc}"


def main(argv: list[str]) -> int:
    base, session, question, *follow_ups = argv
    url = (base if session == "-" else base.replace("/v1", f"/s/{session}/v1")) + "/chat/completions"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You can add numbers with the add tool."},
        {"role": "user", "content": question}]
    with httpx.Client(timeout=120) as http:
        def ask(**extra: Any) -> dict[str, Any]:
            r = http.post(url, json={"messages": messages, "tools": TOOLS, "temperature": 0,
                                     "max_tokens": 24, **extra})
            if r.status_code != 200:
                print(f"HTTP {r.status_code}: {r.text}", file=sys.stderr)
                raise SystemExit(1)
            msg: dict[str, Any] = r.json()["choices"][0]["message"]
            messages.append({k: v for k, v in msg.items() if v is not None})
            return msg

        msg = ask(tool_choice={"type": "function", "function": {"name": "add"}})
        rounds = 0
        while msg.get("tool_calls") and rounds < MAX_TOOL_ROUNDS:
            rounds += 1
            for call in msg["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": _add(call["function"]["arguments"])})
            msg = ask()
        for text in follow_ups:
            messages.append({"role": "user", "content": text})
            ask()
    print(json.dumps(messages))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
