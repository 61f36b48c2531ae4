"""Where the answer is in a `/verify` body: the response text (string, Responses-API object
or chat completion) and the expected answer (top level, `metadata` or `verifier_metadata`).

Every walk is linear in the body and every refusal is a 422 naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from benchmarks.serve_json import invalid

__all__ = ["extract_response_text", "find_expected"]


# --------------------------------------------------------------------------- response parsing


def _text_parts(content: Any, field: str) -> str:
    """Concatenate the text parts of a message `content` (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(field, f"expected a string or a list of parts, got {type(content).__name__}")
    out: list[str] = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            raise invalid(f"{field}[{j}]", f"expected an object, got {type(part).__name__}")
        # output_text (Responses API), text (chat parts), reasoning_text / summary_text
        # (reasoning items); refusals and images carry no answer text.
        if part.get("type", "text") in ("output_text", "text", "reasoning_text", "summary_text"):
            text = part.get("text")
            if text is None:
                continue
            if not isinstance(text, str):
                raise invalid(
                    f"{field}[{j}].text", f"expected a string, got {type(text).__name__}"
                )
            out.append(text)
    return "".join(out)


def _responses_api_text(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    output = obj.get("output")
    if not isinstance(output, list):
        raise invalid("response.output", f"expected a list, got {type(output).__name__}")
    messages: list[str] = []
    reasoning: list[str] = []
    for i, item in enumerate(output):
        field = f"response.output[{i}]"
        if not isinstance(item, dict):
            raise invalid(field, f"expected an object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role", "assistant") != "assistant":
                continue
            messages.append(_text_parts(item.get("content"), f"{field}.content"))
        elif kind == "reasoning":
            # Prefer the raw reasoning text; fall back to the summary some servers return.
            text = _text_parts(item.get("content"), f"{field}.content")
            if not text:
                text = _text_parts(item.get("summary"), f"{field}.summary")
            if text:
                reasoning.append(text)
        # function_call / function_call_output items are tool traffic, not the answer.
    # Separate messages with a newline so numbers in consecutive messages cannot fuse.
    return "\n".join(m for m in messages if m), ("\n".join(reasoning) or None)


def _chat_completion_text(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        raise invalid("response.choices", "expected a non-empty list")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise invalid("response.choices[0]", f"expected an object, got {type(choice).__name__}")
    message = choice.get("message")
    if message is None and isinstance(choice.get("text"), str):
        return choice["text"], None  # legacy completions choice
    if not isinstance(message, dict):
        raise invalid("response.choices[0].message", "expected an object")
    text = _text_parts(message.get("content"), "response.choices[0].message.content")
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if reasoning is not None and not isinstance(reasoning, str):
        raise invalid("response.choices[0].message.reasoning_content", "expected a string")
    return text, reasoning or None


def extract_response_text(response: Any) -> tuple[str, str | None]:
    """The answer text and the reasoning text (if separate) of a model response.

    Accepts a plain string, a Responses-API object (NeMo Gym's `NeMoGymResponse`) or an
    OpenAI chat completion.

    Raises:
        ApiError: 422 naming the field when the response has none of those shapes.
    """
    if isinstance(response, str):
        return response, None
    if isinstance(response, dict):
        if "output" in response:
            return _responses_api_text(response)
        if "choices" in response:
            return _chat_completion_text(response)
        if isinstance(response.get("output_text"), str):
            return response["output_text"], None
        raise invalid(
            "response",
            "an object must be a Responses API response (`output`) or a chat completion "
            "(`choices`)",
        )
    if response is None:
        raise invalid("response", "required")
    raise invalid("response", f"expected a string or an object, got {type(response).__name__}")


def _as_answer(value: Any, field: str) -> str:
    if isinstance(value, str):
        return value
    # Datasets store numeric answers as numbers; bool is an int subclass but no answer.
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(field, "must be finite")
        return str(value)
    raise invalid(field, f"expected a string or a number, got {type(value).__name__}")


def find_expected(body: Mapping[str, Any], metadata: Mapping[str, Any]) -> str:
    sources: list[tuple[Mapping[str, Any], str]] = [(body, ""), (metadata, "metadata.")]
    # NeMo Gym rows keep per-item verifier inputs in `verifier_metadata`.
    verifier = body.get("verifier_metadata")
    if isinstance(verifier, dict):
        sources.append((verifier, "verifier_metadata."))
    for source, where in sources:
        for key in ("expected", "expected_answer"):
            if source.get(key) is not None:
                return _as_answer(source[key], f"{where}{key}")
    raise invalid(
        "expected",
        "required (send `expected` or `expected_answer`, or put it in `metadata` or "
        "`verifier_metadata`)",
    )
