"""Capping tool output before the model sees it: the head and the tail are kept.

A tool that floods (a build log, `yes`) must not blow the model's context nor the row's
size. The start of an output usually says what ran and the end says how it ended, so the
middle is what goes, with a marker saying how much.
"""

from __future__ import annotations


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to about `limit` characters, head and tail kept: (text, was it cut)."""
    if limit <= 0 or len(text) <= limit:
        return text, False
    head = limit // 2
    tail = limit - head
    dropped = len(text) - head - tail
    return f"{text[:head]}\n\n[... {dropped} characters truncated ...]\n\n{text[-tail:]}", True
