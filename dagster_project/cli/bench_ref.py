"""`--bench ./file.py` and `--bench file.py:name`: a BYOB file as the benchmark, as NeMo
Evaluator 0.3.0 accepts it (the file is imported; `:name` picks one of the benchmarks it
registers, otherwise it must register exactly one)."""

from __future__ import annotations

from pathlib import Path

from nel_resources.config import ConfigError


def resolve_bench_file(ref: str) -> tuple[str, str] | None:
    """Import the BYOB file `ref` names and return `(absolute file, benchmark name)`.

    Returns None when `ref` is not a file reference (a registry name or `gym://...`).

    Raises:
        ConfigError: the file is missing, registers nothing, several benchmarks without a
            `:name`, or not the `:name` asked for.
    """
    from benchmarks._registry import is_file_reference

    if not is_file_reference(ref):
        return None
    path = Path(ref[: ref.rindex(".py") + 3]).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--bench {ref}: no such benchmark file {path}")
    from benchmarks.errors import NelError
    from benchmarks.plugins import resolve_benchmark_ref

    try:
        return str(path), resolve_benchmark_ref(ref)
    except NelError as exc:
        raise ConfigError(f"--bench {ref}: {exc}") from None
