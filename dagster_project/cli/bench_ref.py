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
    from benchmarks import list_benchmarks
    from benchmarks.plugins import load_module

    before = set(list_benchmarks())
    load_module(str(path))
    new = sorted(set(list_benchmarks()) - before)
    if name is not None:
        if name not in list_benchmarks():
            raise ConfigError(f"--bench {ref}: {path.name} registers no benchmark named {name!r} "
                              f"(it registers: {', '.join(new) or 'none new'})")
        return str(path), name
    if len(new) == 1:
        return str(path), new[0]
    if len(new) > 1:
        raise ConfigError(f"--bench {ref}: {path.name} registers {len(new)} benchmarks "
                          f"({', '.join(new)}); pick one with --bench {file}:<name>")
    # Already imported in this process (its names are not new): the file's stem, if registered.
    stem = path.stem.lower().replace("-", "_")
    if stem in list_benchmarks():
        return str(path), stem
    raise ConfigError(f"--bench {ref}: {path.name} registers no benchmark; decorate a scorer "
                      "with @benchmark(name=..., dataset=...) and @scorer")
