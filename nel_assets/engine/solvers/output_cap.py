"""Capping tool output before the model sees it: the head and the tail are kept.

A tool that floods (a build log, `yes`) must not blow the model's context nor the row's
size. The start of an output usually says what ran and the end says how it ended, so the
middle is what goes, with a marker saying how much.
"""

from __future__ import annotations


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters, the marker included, head and tail kept:
    (text, was it cut). Capping twice (a source, then the solver) changes nothing more."""
    if limit <= 0 or len(text) <= limit:
        return text, False
    marker = "\n\n[... {} characters truncated ...]\n\n"
    room = limit - len(marker.format(len(text)))
    if room < 2:  # no room for a marker: the head alone
        return text[:limit], True
    head = room - room // 2
    tail = room // 2
    return f"{text[:head]}{marker.format(len(text) - head - tail)}{text[-tail:]}", True
