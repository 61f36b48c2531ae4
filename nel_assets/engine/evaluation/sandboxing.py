"""Sandboxes in the eval loop: which benchmarks need one, and one sandbox per sample.

A benchmark whose environment sets `needs_sandbox` (HumanEval) gets a started sandbox of
its configured type as `verify(..., sandbox=...)`, as NeMo Evaluator passes it. Here:

- `check_sandbox(run)` refuses, before any request, a run of such a benchmark without a
  sandbox (`type: none` or no `sandbox:`), in one line naming the benchmark;
- `SandboxPool` holds the shard's `SandboxFactory`, which bounds the sandboxes alive at once
  by the block's `concurrency`, apart from the model's `max_concurrent`: a sample holds a
  sandbox slot only around the code it runs, never around its model request;
- `SampleSandboxes` is one sample's sandboxes. Stateful (`stateful: true`): solve and
  verify share one sandbox. Stateless: verify gets its own sandbox, and when the solve
  sandbox was used its workdir reaches the verify sandbox through a shared host volume.
  Sandboxes start lazily: a solver that never asks for one (nel's `simple` solver) costs a
  sandbox during verify only. Every sandbox started is stopped, whatever happens.
- A seed may ask for scratch directories (`sandbox_spec["scratch_dirs"]`, e.g. a Harbor
  task's `/tests` and `/logs`, which its verifier writes to on a read-only root): each is
  a fresh host directory of the sample (in the factory's `shared_dir` when it has one: the
  filesystem a cluster's nodes share), mounted writable in every sandbox of the sample
  and removed with it.

Sandbox work is asynchronous end to end (the types run their processes with asyncio), so
nothing here blocks the event loop. No Dagster import.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from benchmarks import EvalEnvironment, SeedResult
from benchmarks.errors import NelError
from benchmarks.uri_schemes import is_uri
from nel_resources.config import SandboxConfig
from nel_resources.config.deployment import NodePool
from nel_resources.sandboxes.base import (
    Sandbox,
    SandboxError,
    SandboxFactory,
    SandboxSpec,
    VolumeMount,
    running,
)
from nel_resources.specs import RunSpec

#: Sandbox types that run each problem in the image its seed names (Harbor tasks).
_PER_TASK_IMAGE_TYPES = ("docker", "slurm", "apptainer", "ecs_fargate")
#: Where a stateless pair's shared volume is mounted in both sandboxes.
SHARED_MOUNT = "/shared"


def needs_sandbox(env_or_class: Any) -> bool:
    """Whether a benchmark runs model code (its `verify` needs a sandbox)."""
    return bool(getattr(env_or_class, "needs_sandbox", False))


def has_sandbox(cfg: SandboxConfig | None) -> bool:
    """A configured sandbox block of a real type (not absent, not `type: none`)."""
    return cfg is not None and cfg.type != "none"


def trusts_solver(run: RunSpec) -> bool:
    """Whether the run's solver brings its own reward (`gym_delegation` with `trust_reward:
    true`: Gym's verdict), so `verify` and its sandbox never run."""
    solver = getattr(run, "solver", None)
    return getattr(solver, "type", None) == "gym_delegation" and bool(
        getattr(solver, "trust_reward", False))


def check_sandbox(run: RunSpec, env_class: Any = None) -> None:
    """Refuse a benchmark that runs model code without a sandbox (one line, before any request).

    Args:
        run: the (benchmark, model) run.
        env_class: the benchmark's class or environment (looked up by name when None).
    """
    if env_class is None and not is_uri(run.env.name, "gym"):
        from benchmarks import get_factory

        try:
            env_class = get_factory(run.env.name)
        except NelError:
            return  # unknown names are refused elsewhere, with suggestions
    if needs_sandbox(env_class) and not has_sandbox(run.sandbox) and not trusts_solver(run):
        raise NelError(f"benchmark {run.benchmark!r} runs model-written code and needs a sandbox: "
                       "add `sandbox: {type: local}` (or `{type: docker, image: ...}`) to it")


class FactoryOpener(Protocol):
    """What opens a run's sandbox factory (the Dagster `SandboxResource`, or `open_factory`)."""

    def open(self) -> contextlib.AbstractAsyncContextManager[SandboxFactory]: ...


@contextlib.asynccontextmanager
async def open_factory(cfg: SandboxConfig, pool: NodePool | None = None) -> AsyncIterator[SandboxFactory]:
    """The factory of a sandbox block (on node pool `pool` when the block names one),
    closed (`aclose`) whatever happens in the block."""
    from nel_resources.sandboxes.factory import make_factory

    factory = make_factory(cfg, pool=pool)
    try:
        yield factory
    finally:
        await factory.aclose()


class ConfigOpener:
    """Opens a factory straight from a sandbox block (runs outside Dagster: the Python API)."""

    def __init__(self, cfg: SandboxConfig, pool: NodePool | None = None) -> None:
        self.cfg = cfg
        self.pool = pool

    def open(self) -> contextlib.AbstractAsyncContextManager[SandboxFactory]:
        """The block's factory, closed on exit."""
        return open_factory(self.cfg, self.pool)


def spec_for(seed: SeedResult) -> SandboxSpec:
    """The sandbox spec of one problem: the seed's (NeMo Evaluator's field names), else the default."""
    raw = seed.sandbox_spec
    if not raw:
        return SandboxSpec()
    if isinstance(raw, SandboxSpec):
        return raw
    data = dict(raw)
    vols = [v if isinstance(v, VolumeMount) else VolumeMount(**v) for v in data.pop("volumes", None) or []]
    known = {k: data[k] for k in ("image", "workdir", "env", "files", "entrypoint",
                                  "environment_dir") if data.get(k) is not None}
    return SandboxSpec(**known, volumes=vols)


class SampleSandboxes:
    """One sample's sandboxes, started on first use and all stopped by `SandboxPool.sample`."""

    def __init__(self, pool: SandboxPool, spec: SandboxSpec, scratch: list[str] | None = None) -> None:
        self._pool = pool
        self._spec = spec
        self._scratch_paths = list(scratch or [])
        self._scratch: Path | None = None
        self._solve: Sandbox | None = None
        self._verify: Sandbox | None = None
        self._shared: Path | None = None
        self._started: list[Sandbox] = []

    def _mkdtemp(self, prefix: str) -> Path:
        """A new host directory of the sample, where the pool's sandboxes can reach it."""
        base = self._pool.shared_dir
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=base))

    def _with_scratch(self, spec: SandboxSpec) -> SandboxSpec:
        if not self._scratch_paths:
            return spec
        if self._scratch is None:
            self._scratch = self._mkdtemp("nel-sbx-scratch-")
            for i in range(len(self._scratch_paths)):
                d = self._scratch / str(i)
                d.mkdir()
                d.chmod(0o777)  # the sandbox's unprivileged uid writes there
            self._scratch.chmod(0o755)
        vols = [VolumeMount(str(self._scratch / str(i)), p) for i, p in enumerate(self._scratch_paths)]
        return dataclasses.replace(spec, env=dict(spec.env), files=dict(spec.files),
                                   volumes=[*spec.volumes, *vols])

    async def _start(self, spec: SandboxSpec) -> Sandbox:
        if self._pool.volumes or self._pool.reach_ports:  # what the solver's agent needs
            spec = dataclasses.replace(spec, volumes=[*spec.volumes, *self._pool.volumes],
                                       reach_ports=(*spec.reach_ports, *self._pool.reach_ports))
        sb = self._pool.factory.create(self._with_scratch(spec))
        self._started.append(sb)  # stopped by close(), even when its start fails
        await sb.start()  # waits for one of the factory's `concurrency` slots
        return sb

    def _with_shared(self) -> SandboxSpec:
        if self._shared is None:
            self._shared = self._mkdtemp("nel-sbx-shared-")
            # Each sandbox may run as its own unprivileged uid: both must reach the volume.
            self._shared.chmod(0o777)
        vol = VolumeMount(str(self._shared), SHARED_MOUNT)
        return dataclasses.replace(self._spec, env=dict(self._spec.env),
                                   files=dict(self._spec.files), volumes=[*self._spec.volumes, vol])

    async def solve_sandbox(self) -> Sandbox:
        """The sandbox a solver works in (an agent's tools)."""
        if self._solve is None:
            spec = self._spec if self._pool.stateful else self._with_shared()
            self._solve = await self._start(spec)
        return self._solve

    async def verify_sandbox(self) -> Sandbox:
        """The sandbox `verify` runs the answer in: the solve sandbox when stateful."""
        if self._pool.stateful:
            return await self.solve_sandbox()
        if self._verify is None:
            spec = self._with_shared() if self._solve is not None else self._spec
            self._verify = await self._start(spec)
        return self._verify

    async def close(self) -> None:
        """Stop every sandbox this sample started (which frees their slots)."""
        started, self._started = self._started, []
        errors: list[BaseException] = []
        for sb in reversed(started):
            try:
                await sb.stop()
            except Exception as exc:  # stop the others all the same
                errors.append(exc)
        for attr in ("_shared", "_scratch"):
            d = getattr(self, attr)
            if d is not None:
                await asyncio.to_thread(shutil.rmtree, d, True)
                setattr(self, attr, None)
        if errors:
            raise errors[0]


class SandboxPool:
    """A shard's sandboxes: the factory (which bounds how many are alive at once by the
    block's `concurrency`) and the mode, stateful or stateless."""

    def __init__(self, factory: SandboxFactory, *, stateful: bool = False) -> None:
        self.factory = factory
        self.stateful = stateful
        #: where a sample's host directories (scratch, shared volume) are made: the directory
        #: a cluster factory's nodes share with nel (`shared_dir`), else the system temp dir
        self.shared_dir: Path | None = getattr(factory, "shared_dir", None)
        #: mounted in every sandbox of the shard (a solver's `sandbox_volumes`)
        self.volumes: list[VolumeMount] = []
        #: host ports every sandbox of the shard must reach (a solver's `sandbox_ports`)
        self.reach_ports: tuple[int, ...] = ()

    @contextlib.asynccontextmanager
    async def sample(self, seed: SeedResult) -> AsyncIterator[SampleSandboxes]:
        """One sample's sandboxes; all of them are stopped when the block ends."""
        raw = seed.sandbox_spec if isinstance(seed.sandbox_spec, dict) else {}
        s = SampleSandboxes(self, spec_for(seed), [str(p) for p in raw.get("scratch_dirs") or []])
        try:
            yield s
        finally:
            await s.close()


@contextlib.asynccontextmanager
async def sandbox_pool(run: RunSpec, env: EvalEnvironment,
                       opener: FactoryOpener | None = None) -> AsyncIterator[SandboxPool | None]:
    """The shard's sandbox pool, or None when the run has no sandbox.

    Any benchmark with a sandbox block gets one in `verify` (as NeMo Evaluator does, for
    benchmark files whose scorers use it); one that needs it must have it.

    Raises:
        NelError: the benchmark needs a sandbox and the run has none.
    """
    check_sandbox(run, env)
    if not has_sandbox(run.sandbox):
        yield None
        return
    assert run.sandbox is not None
    async with contextlib.AsyncExitStack() as stack:
        try:
            factory = await stack.enter_async_context((opener or ConfigOpener(run.sandbox, run.sandbox_pool)).open())
            # One sandbox up and down before the first model request: a sandbox that cannot
            # start (no bwrap, no such image, no engine) fails the run now, in one line,
            # instead of after every answer has been paid for.
            async with running(factory.create(await _probe_spec(run, env))):
                pass
        except SandboxError as exc:
            raise NelError(f"benchmark {run.benchmark!r}: its {run.sandbox.type} sandbox cannot "
                           f"run: {exc}") from None
        yield SandboxPool(factory, stateful=run.sandbox.stateful)


async def _probe_spec(run: RunSpec, env: EvalEnvironment) -> SandboxSpec:
    """What the pre-flight sandbox starts from: the default spec, or, for a block of an
    image type that names no image (agent tasks bring their own), the first problem's image
    (and, for ecs_fargate, its build context: ecr_build builds it)."""
    assert run.sandbox is not None
    if run.sandbox.type not in _PER_TASK_IMAGE_TYPES or run.sandbox.image or not len(env):
        return SandboxSpec()
    first = spec_for(await env.seed(0))
    if run.sandbox.type == "ecs_fargate":
        return SandboxSpec(image=first.image, environment_dir=first.environment_dir)
    return SandboxSpec(image=first.image)
