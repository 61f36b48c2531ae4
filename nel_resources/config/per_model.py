"""NeMo Evaluator's one-entry-per-model form, folded into nel's one entry per benchmark.

NeMo Evaluator 0.3.0 evaluates two models on one benchmark by listing the benchmark twice,
each entry with its own `solver.service`. nel keys a benchmark's assets by its name and runs
its models as partitions of those assets, so entries that differ only in the service become
one entry listing every service: the CLI run, `--dry-run`, the Dagster definitions and the
daemon all read the config through this one step, so they accept and refuse alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nel_resources.config._base import key_error

if TYPE_CHECKING:
    from nel_resources.config.benchmarks import BenchmarkConfig
    from nel_resources.config.services import ServiceConfig


def _settings(b: BenchmarkConfig) -> dict[str, Any]:
    """Everything of an entry but the services it runs against."""
    return b.model_dump(mode="json", exclude={"service"})


def merge_per_model_entries(benchmarks: list[BenchmarkConfig],
                            services: dict[str, ServiceConfig]) -> tuple[list[BenchmarkConfig], list[int]]:
    """Merge entries of one benchmark that differ only in their service.

    Returns the entries (the first of each benchmark carrying every service, in order) and,
    per returned entry, the index it had in `benchmarks` (so file:line stays right).

    Raises:
        PydanticCustomError: two entries of one benchmark differ in another setting (the
            keys named), or name the same service twice.
    """
    first: dict[str, int] = {}  # benchmark name -> index into `out`
    out: list[BenchmarkConfig] = []
    origin: list[int] = []
    for i, b in enumerate(benchmarks):
        key = b.name
        if key not in first:
            first[key] = len(out)
            out.append(b)
            origin.append(i)
            continue
        j = first[key]
        kept = out[j]
        at = f"benchmarks.{i}"
        mine, theirs = _settings(b), _settings(kept)
        if mine != theirs:
            differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            raise key_error(at, f"benchmark {b.name!r} appears twice in the config "
                            f"(benchmarks[{origin[j]}] and benchmarks[{i}]) with different "
                            f"{', '.join(differ)}; one benchmark's models share its settings: "
                            "give the entries the same settings (each its own service)")
        have = kept.service_names(services)
        add = b.service_names(services)
        twice = sorted(set(have) & set(add))
        if twice:
            raise key_error(at, f"benchmark {b.name!r} appears twice in the config for service "
                            f"{twice[0]!r} (benchmarks[{origin[j]}] and benchmarks[{i}]); "
                            "remove one entry, or list several services under `service:`")
        out[j] = kept.model_copy(update={"service": [*have, *add]})
    return out, origin
