"""What `nel serve` serves: a benchmark built by registry name (plugins imported first),
optionally cut to its first problems, and whether it needs a sandbox to score."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from benchmarks._registry import UnknownBenchmarkError, get_benchmark
from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.plugins import load_module

__all__ = ["LimitedEnvironment", "SandboxProvider", "build_environment", "import_plugins",
           "needs_sandbox"]


class LimitedEnvironment(EvalEnvironment):
    """The first `limit` problems of another environment (`--max-problems`)."""

    def __init__(self, inner: EvalEnvironment, limit: int):
        if limit < 0:
            raise NelError(f"--max-problems must be >= 0, got {limit}")
        self.inner = inner
        self.limit = min(limit, len(inner))
        self.name = inner.name
        self.version = inner.version

    async def seed(self, idx: int) -> SeedResult:
        """Problem `idx` of the inner environment (0 <= idx < limit)."""
        if not 0 <= idx < self.limit:
            raise IndexError(idx)
        return await self.inner.seed(idx)

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        """Delegate to the inner environment's scorer."""
        return await self.inner.verify(response, expected, **metadata)

    def __len__(self) -> int:
        return self.limit

    def fingerprint(self) -> str:
        """The inner fingerprint plus the cut-off."""
        return f"{self.inner.fingerprint()}:first{self.limit}"

    def data_fingerprint(self) -> str:
        """The inner data hash (the cut-off is in `fingerprint`)."""
        return self.inner.data_fingerprint()

    async def close(self) -> None:
        """Close the inner environment."""
        await self.inner.close()


def import_plugins(specs: Iterable[str]) -> None:
    """Import modules (dotted names or `.py` paths) so their benchmarks register.

    Raises:
        NelError: when a module cannot be found.
    """
    for spec in specs:
        if spec.strip():
            load_module(spec)


def build_environment(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    max_problems: int | None = None,
    imports: Sequence[str] = (),
) -> EvalEnvironment:
    """Build a benchmark by registry name (or `gym://`), optionally cut to `max_problems`.

    Raises:
        NelError: for an unknown name (with the registry's suggestions) or a bad import.
    """
    import_plugins(imports)
    try:
        env = get_benchmark(name, **dict(params or {}))
    except UnknownBenchmarkError as exc:
        raise NelError(str(exc)) from None
    if max_problems is not None:
        env = LimitedEnvironment(env, max_problems)
    return env


#: What `generate_app(sandbox=...)` takes: each call opens one started sandbox for one
#: `/verify` (an async context manager; the sandbox is stopped when it exits). It must work
#: from any event loop. The CLI builds it from `--sandbox` (this package never imports the
#: sandbox types).
SandboxProvider = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def needs_sandbox(env: EvalEnvironment) -> bool:
    """Whether the served benchmark runs model-written code (its `verify` needs `sandbox=`)."""
    inner = env.inner if isinstance(env, LimitedEnvironment) else env
    return bool(getattr(inner, "needs_sandbox", False))
