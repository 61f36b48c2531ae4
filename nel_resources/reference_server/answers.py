"""What the reference model says: answer books, scripted tool-calling turns, and the
conversation state (turn number, last tool result) a scripted turn is picked by."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from nel_resources.reference_server.replies import text_of


class Answer(NamedTuple):
    """What the model says: visible content and optional reasoning."""

    content: str
    reasoning: str | None = None


class AnswerBook:
    """Deterministic answer lookup: exact sha256 of the prompt first, then substrings in order."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.by_sha: dict[str, Answer] = {}
        self.by_match: list[tuple[str, Answer]] = []
        for i, row in enumerate(rows):
            if "content" not in row:
                raise ValueError(f"answers row {i + 1} has no 'content': {dict(row)!r}")
            answer = Answer(str(row["content"]), row.get("reasoning"))
            if row.get("sha256"):
                self.by_sha.setdefault(str(row["sha256"]).lower(), answer)
            elif "match" in row:
                self.by_match.append((str(row["match"]), answer))
            else:
                raise ValueError(f"answers row {i + 1} needs 'match' or 'sha256'")

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> AnswerBook:
        """Load rows from a JSON-lines file (blank lines ignored)."""
        rows = []
        with open(path, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{lineno}: invalid JSON: {exc}") from exc
        return cls(rows)

    def lookup(self, prompt: str) -> Answer | None:
        """The answer for ``prompt``, or None."""
        if self.by_sha:
            hit = self.by_sha.get(hashlib.sha256(prompt.encode()).hexdigest())
            if hit is not None:
                return hit
        for needle, answer in self.by_match:
            if needle in prompt:
                return answer
        return None


class ToolScript:
    """Scripted tool-calling turns: how a test makes the reference server act as an agent.

    Each JSONL row is ``{"match": <substring of the user prompt>, "turns": [...],
    "repeat_last": false}``. A conversation's turn number is the count of assistant turns
    after its last user message; turn k answers with ``turns[k]``:

    - ``{"tool_calls": [{"name": "bash", "arguments": {...}}, ...], "content": "..."}``
      (several calls = parallel calls in one turn; ``"arguments_raw": "<text>"`` sends the
      arguments verbatim, e.g. malformed JSON);
    - ``"reasoning": "..."`` in a turn: sent as the message's ``reasoning_content``;
    - ``{"content": "..."}``: a final answer. ``{last_tool}`` in it is replaced by the
      last tool result the conversation carries (so the answer depends on what the tool
      really returned).

    Past the last turn the server repeats it when ``repeat_last`` (a model that never stops
    calling tools), else it answers with the server's default content.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.rows: list[tuple[str, list[dict[str, Any]], bool]] = []
        for i, row in enumerate(rows):
            turns = row.get("turns")
            if not isinstance(row.get("match"), str) or not isinstance(turns, list) or not turns:
                raise ValueError(f"tool script row {i + 1} needs a string 'match' and a "
                                 f"non-empty 'turns' list")
            self.rows.append((row["match"], [dict(t) for t in turns], bool(row.get("repeat_last"))))

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> ToolScript:
        """Load rows from a JSON-lines file (blank lines ignored)."""
        with open(path, "rb") as fh:
            return cls(orjson.loads(line) for line in fh if line.strip())

    def turn(self, prompt: str, done_turns: int) -> dict[str, Any] | None:
        """The scripted turn for ``prompt`` after ``done_turns`` assistant turns, or None."""
        for needle, turns, repeat in self.rows:
            if needle in prompt:
                if done_turns < len(turns):
                    return turns[done_turns]
                return turns[-1] if repeat else None
        return None


def script_calls(turn: Mapping[str, Any], turn_no: int) -> list[tuple[str, str, str]]:
    """(call id, tool name, arguments text) of a scripted turn's tool calls."""
    out = []
    for i, call in enumerate(turn.get("tool_calls") or []):
        raw = call.get("arguments_raw")
        args = raw if isinstance(raw, str) else orjson.dumps(call.get("arguments") or {}).decode()
        out.append((f"call_{turn_no}_{i}", str(call.get("name", "")), args))
    return out


def chat_state(messages: list[Any], whole: bool = False) -> tuple[int, str]:
    """(assistant turns after the last user message, or in the whole chat when `whole`;
    the last tool result's text)."""
    turns, last_tool = 0, ""
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "user":
            if not whole:
                turns = 0
        elif role == "assistant":
            turns += 1
        elif role == "tool":
            last_tool = text_of(msg.get("content"))
    return turns, last_tool


def responses_state(items: list[Any]) -> tuple[int, str]:
    """As `chat_state` for Responses-API input items: a run of `function_call` items (and
    the assistant message before them) is one turn."""
    turns, last_tool, in_turn = 0, "", False
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, role = item.get("type"), item.get("role")
        if role == "user":
            turns, in_turn = 0, False
        elif kind == "function_call" or role == "assistant":
            if not in_turn:
                turns += 1
            in_turn = True
            continue
        elif kind == "function_call_output":
            last_tool = str(item.get("output", ""))
        in_turn = False
    return turns, last_tool

