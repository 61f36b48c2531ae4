"""Cheap validity checks of the files a run leaves behind (bundle, report, exports).

Every check is existence plus a look at what makes a file usable: JSON parses, a JSONL file
has the expected number of complete lines and its last line parses, a Parquet file is whole.
Each returns `None` when the file is fine, else a short reason ("missing", "torn", ...),
so the planner can say why it rebuilds something. Nothing here sends a request or rewrites
a file; rebuilding is the bundle asset's job. No Dagster import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

_CHUNK = 1 << 20
_PARQUET_MAGIC = b"PAR1"


def json_problem(path: Path, *, require: tuple[str, ...] = ()) -> str | None:
    """Why the JSON file at `path` is unusable (None if it parses and has `require` keys)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError):
        return "torn or not JSON"
    if require:
        if not isinstance(data, dict):
            return "not a JSON object"
        absent = [k for k in require if k not in data]
        if absent:
            return f"lacks {', '.join(absent)}"
    return None


def read_json(path: Path) -> Any | None:
    """The parsed JSON at `path`, or None when it is missing or torn."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def jsonl_problem(path: Path, n_lines: int) -> str | None:
    """Why a JSONL file is unusable: missing, a torn last line, or not `n_lines` lines."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    with f:
        count = 0
        prev = last = b""  # the last two chunks: the last line may start in the one before
        while chunk := f.read(_CHUNK):
            count += chunk.count(b"\n")
            prev, last = last, chunk
        tail = prev + last
    if n_lines == 0:
        return None if count == 0 and not tail else f"{count} lines, expected 0"
    if not tail.endswith(b"\n"):
        return "torn (last line incomplete)"
    if count != n_lines:
        return f"{count} lines, expected {n_lines}"
    last = tail[:-1].rsplit(b"\n", 1)[-1]
    try:
        orjson.loads(last)
    except orjson.JSONDecodeError:
        return "torn (last line is not JSON)"
    return None


def parquet_problem(path: Path) -> str | None:
    """Why a Parquet file is unusable (None if its frame is whole).

    Reads the frame, not the footer's contents: the magic `PAR1` at both ends and a footer
    length that fits. Every Parquet file nel writes is renamed into place whole, so what a
    crash or a copy can leave is a missing, empty or cut file, which this tells apart, with
    no pyarrow import (an unchanged rerun checks every bundle)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            size = f.seek(0, os.SEEK_END)
            if size >= 12:
                f.seek(size - 8)
                tail = f.read(8)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"torn ({type(exc).__name__})"
    if size < 12 or head != _PARQUET_MAGIC or tail[4:] != _PARQUET_MAGIC:
        return "torn (no Parquet frame)"
    if int.from_bytes(tail[:4], "little") > size - 12:
        return "torn (footer length past the file)"
    return None


def text_problem(path: Path) -> str | None:
    """Why a text artifact (report.md) is unusable: missing or empty."""
    try:
        return None if path.stat().st_size > 0 else "empty"
    except FileNotFoundError:
        return "missing"
