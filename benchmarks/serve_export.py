"""`nel serve --export-data`: the served dataset as NeMo Gym JSONL rows (what
`ng_collect_rollouts` reads)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment, SeedResult
from benchmarks.errors import NelError
from benchmarks.serve_json import dumps

__all__ = ["export_data", "export_rows"]


def _row_uuid(benchmark: str, idx: int) -> str:
    # NeMo Evaluator's form (`<benchmark>-<idx>`): deterministic, so a re-export yields the
    # same ids, and rollouts join back to their item by it in either tool's pipelines.
    return f"{benchmark}-{idx}"


def _input_messages(seed: SeedResult) -> list[dict[str, Any]]:
    if seed.messages:
        messages = [dict(m) for m in seed.messages]
    else:
        messages = [{"role": "user", "content": seed.prompt}]
    if seed.system and not (messages and messages[0].get("role") in ("system", "developer")):
        messages.insert(0, {"role": "system", "content": seed.system})
    return messages


async def export_rows(env: EvalEnvironment, benchmark: str | None = None) -> list[dict[str, Any]]:
    """The dataset as NeMo Gym rows (what `ng_collect_rollouts` reads).

    Each row is `{responses_create_params: {input: [...]}, expected_answer, uuid, eval_type,
    metadata}`; `metadata` carries the seed metadata plus `idx`, so `/verify` gets it back.
    """
    name = benchmark or env.name
    rows = []
    for idx in range(len(env)):
        seed = await env.seed(idx)
        metadata = dict(seed.metadata)
        metadata.setdefault("idx", idx)
        rows.append(
            {
                "responses_create_params": {"input": _input_messages(seed)},
                "expected_answer": seed.expected_answer,
                "uuid": _row_uuid(name, idx),
                "eval_type": name,
                "metadata": metadata,
            }
        )
    return rows


def export_data(
    env: EvalEnvironment, path: str | Path, benchmark: str | None = None, *, close: bool = False
) -> int:
    """Write the JSONL export to `path` (atomically); returns the number of rows.

    Args:
        env: The environment to export.
        path: Target JSONL file.
        benchmark: Name for `eval_type` and the uuids (defaults to `env.name`).
        close: Close the environment afterwards, inside the same event loop (a remote
            environment's HTTP session belongs to that loop).
    """

    async def run() -> list[dict[str, Any]]:
        try:
            return await export_rows(env, benchmark)
        finally:
            if close:
                await env.close()

    rows = asyncio.run(run())
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        raise NelError(f"--export-data: {target} is a directory; name a .jsonl file or a directory")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with tmp.open("wb") as fh:
            for row in rows:
                fh.write(dumps(row))
                fh.write(b"\n")
        tmp.replace(target)
    finally:
        # a failed write (disk full, permissions) must not leave the temp file behind
        tmp.unlink(missing_ok=True)
    return len(rows)
