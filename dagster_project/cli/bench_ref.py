"""`--bench ./file.py` and `--bench file.py:name`: a BYOB file as the benchmark, as NeMo
Evaluator 0.3.0 accepts it (the file is imported; `:name` picks one of the benchmarks it
registers, otherwise it must register exactly one)."""

from __future__ import annotations

from pathlib import Path

from nel_resources.config import ConfigError


def split_bench_ref(ref: str) -> tuple[str, str | None] | None:
    """`(file, name or None)` when `ref` names a `.py` file, else None (a registry name)."""
    if "://" in ref:
        return None
    path, name = ref, None
    if ":" in ref:
        head, tail = ref.rsplit(":", 1)
        if head.endswith(".py"):
            path, name = head, tail.strip() or None
    return (path, name) if path.endswith(".py") else None


def resolve_bench_file(ref: str) -> tuple[str, str] | None:
    """Import the BYOB file `ref` names and return `(absolute file, benchmark name)`.

    Returns None when `ref` is not a file reference.

    Raises:
        ConfigError: the file is missing, registers nothing, several benchmarks without a
            `:name`, or not the `:name` asked for.
    """
    split = split_bench_ref(ref)
    if split is None:
        return None
    file, name = split
    path = Path(file).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--bench {ref}: no such benchmark file {path}")
    from benchmarks.errors import NelError
    from benchmarks.plugins import load_benchmark_file

    try:
        names = load_benchmark_file(path, name)
    except NelError as exc:
        raise ConfigError(f"--bench {ref}: {exc}") from None
    if len(names) > 1:
        raise ConfigError(f"--bench {ref}: {path.name} registers {len(names)} benchmarks "
                          f"({', '.join(names)}); pick one with --bench {file}:<name>")
    return str(path), names[0]
