"""The Python API of NeMo Evaluator 0.3.0 on nel's engine: `run_evaluation` and `write_all`.

    from nemo_evaluator import ModelClient, ChatSolver, get_environment, run_evaluation
    from nemo_evaluator.engine import write_all

    env = get_environment("./my_bench.py")
    client = ModelClient(base_url="http://127.0.0.1:8000/v1", model="m")
    bundle = asyncio.run(run_evaluation(env, ChatSolver(client), n_repeats=4))
    write_all(bundle, "./eval_results")

`run_evaluation` runs nel's shard loop (the one `nel eval run` uses: retries, adaptive
concurrency, reasoning split, failure categories) and returns nel's bundle with the rows
kept under `_table`; `write_all` writes the NeMo-Evaluator-shaped files from them. No
Dagster: this is for scripts and notebooks; `nel eval run` adds the store, staleness and
the asset graph.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.loop import ShardSpec, run_shard
from nel_assets.engine.evaluation.sandboxing import SandboxPool, needs_sandbox, open_factory
from nel_assets.engine.evaluation.sharding import select_problems, shard_bounds
from nel_assets.engine.nemo import nemo_format as nf
from nel_assets.engine.nemo.exports import write_exports
from nel_assets.engine.nemo.progress import NoOpProgress, ProgressTracker
from nel_assets.engine.results.bundle import build_bundle
from nel_assets.engine.solvers import ChatSolver, CompletionSolver, Solver
from nel_resources.sandboxes import SandboxError, SandboxSpec, running
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import slugify


async def run_evaluation(
    env: EvalEnvironment,
    solver: Any,
    n_repeats: int = 1,
    max_problems: int | None = None,
    config: dict[str, Any] | None = None,
    progress: ProgressTracker | None = None,
    problem_range: tuple[int, int] | None = None,
    max_concurrent: int = 32,
    judge_client: Any = None,
    shard_info: tuple[int, int] | None = None,
    sandbox_manager: Any = None,
    sandbox: Any = None,
) -> dict[str, Any]:
    """Evaluate `env` with `solver`: seed, ask the model, verify, score.

    Args:
        env: The environment (any nel or NeMo-Evaluator-style `EvalEnvironment`).
        solver: Any `Solver`: `ChatSolver` / `CompletionSolver` (one request per problem over
            nel's `ModelClient`), `ToolCallingSolver`, `GymDelegationSolver`, or your own
            object with an async `solve(task, ctx) -> SolveResult`.
        n_repeats: Answers per problem.
        max_problems: Only the first N problems (of `problem_range`, if given).
        config: Recorded in the bundle under `config`.
        progress: Told about the start, each sample and the end (default: nothing).
        problem_range: `(start, end)` problem indices, end exclusive.
        max_concurrent: Samples in flight at most (also bounded by the client's).
        judge_client: Not supported yet in nel (a config's judge is); must be None.
        shard_info: `(shard_idx, total_shards)`: this call evaluates that contiguous slice.
        sandbox_manager: NeMo Evaluator's name for the sandbox verify runs code in; here a
            sandbox block (`{"type": "local"}`, a `SandboxConfig`) or a `SandboxFactory`.
        sandbox: The same (nel's name). Without either, `config["sandbox"]` (or the peer's
            `config["_sandbox_config"]`) is used. A benchmark that runs model code
            (`needs_sandbox`, e.g. humaneval) without one is refused before any request.

    Returns:
        nel's bundle for the run (`score`, `per_category`, `runtime`, `failures`, ...),
        plus `config`, `run_id` and the rows under the private key `_table`.

    Raises:
        NelError: an object that is no solver, a bad argument, a bad range, a code benchmark without
            a sandbox, or a sandbox that cannot start.
    """
    if judge_client is not None:
        raise NelError("run_evaluation: judge_client= is not supported yet in nel "
                       "(configure a judge in a config and use `nel eval run`)")
    simple = isinstance(solver, ChatSolver | CompletionSolver)
    if not simple and not isinstance(solver, Solver):
        raise NelError(f"run_evaluation: solver {type(solver).__name__} is not a solver (it needs "
                       "an async `solve(task, ctx)`: ChatSolver, ToolCallingSolver, "
                       "GymDelegationSolver, or your own)")
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, int) or n_repeats < 1:
        raise NelError(f"run_evaluation: n_repeats must be an integer >= 1, not {n_repeats!r}")
    if max_concurrent < 1:
        raise NelError(f"run_evaluation: max_concurrent must be >= 1, not {max_concurrent!r}")
    indices = select_problems(len(env), max_problems=max_problems, problem_range=problem_range)
    shard = 0
    if shard_info is not None:
        shard, total = shard_info
        if not 0 <= shard < total:
            raise NelError(f"run_evaluation: shard_info {shard_info} needs 0 <= shard < total")
        lo, hi = shard_bounds(len(indices), shard, total)
        indices = indices[lo:hi]
    # A solver that calls no model of nel's (a Gym agent calls its own) has no client.
    client: Any = getattr(solver, "client", None)
    model_id = str(getattr(client, "model", None) or getattr(solver, "model_id", None) or "model")
    run_id = uuid.uuid4().hex[:12]
    spec = ShardSpec(benchmark=env.name, model=slugify(model_id), model_id=model_id, shard=shard,
                     indices=indices, repeats=n_repeats, run_id=run_id,
                     system_prompt=getattr(solver, "system_prompt", None),
                     protocol=getattr(client, "protocol", "chat_completions"))
    # ChatSolver/CompletionSolver are the loop's own single request; any other solver runs
    # per sample through the same loop (retries, failure categories, trajectories).
    spec.solver = None if simple else solver
    tracker: ProgressTracker = progress or NoOpProgress()
    tracker.on_start(env.name, len(indices), n_repeats)

    def on_row(row: dict[str, Any]) -> None:
        tokens = row.get("completion_tokens")
        tracker.on_step(row["problem_idx"], row["repeat"], len(indices), n_repeats,
                        float(row.get("reward") or 0.0), tokens, float(row.get("model_ms") or 0.0))

    t0 = time.perf_counter()
    prep = getattr(env, "prepare", None)
    if prep is not None:
        await prep()
    async with _sandbox_pool(env, sandbox if sandbox is not None else sandbox_manager,
                             dict(config or {})) as pool:
        spec.sandboxes = pool
        prepare = getattr(spec.solver, "prepare", None)
        try:
            if indices and prepare is not None:
                await prepare()  # tool names checked once, before any request
            rows = await run_shard(env, client, spec, concurrency=max_concurrent, on_row=on_row)
        finally:
            close_tools = getattr(spec.solver, "close_tools", None)
            if close_tools is not None:
                await close_tools()  # the solver's tool / Gym HTTP sessions, not the client
    table = rows_to_table(rows)
    bundle = build_bundle(table, benchmark=env.name, model=spec.model, model_id=model_id,
                          extra={"config": dict(config or {}), "run_id": run_id})
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    tracker.on_done(sum(1 for x in rewards if x >= 1.0), len(rows), time.perf_counter() - t0,
                    sum(int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0)
                        for r in rows),
                    sum(rewards) / len(rewards) if rewards else None)
    bundle["_table"] = table
    return bundle


def _sandbox_block(given: Any, config: dict[str, Any]) -> Any:
    """The sandbox block or factory the caller gave (argument first, then the config), or None."""
    from pydantic import ValidationError

    from nel_resources.config import SandboxConfig

    if given is None:
        given = config.get("sandbox", config.get("_sandbox_config"))
    if given is None or isinstance(given, SandboxConfig) or hasattr(given, "create"):
        return given
    if isinstance(given, str):
        given = {"type": given}
    elif not isinstance(given, dict):
        # the peer's SandboxConfig (a pydantic model) carries the same keys
        dump = getattr(given, "model_dump", None)
        if dump is None:
            raise NelError(f"run_evaluation: sandbox must be a sandbox block (a dict such as "
                           f"{{'type': 'local'}}) or a SandboxFactory, not {type(given).__name__}")
        # Only the keys the caller set: the peer's defaults are not nel's (its `network`
        # default is `bridge`, nel's `none`), and a full dump would pass them as chosen.
        try:
            dumped = dump(exclude_unset=True)
        except TypeError:  # a model_dump without pydantic's keywords
            dumped = dump()
        given = {k: v for k, v in dumped.items() if v is not None}
    try:
        return SandboxConfig.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise NelError(f"run_evaluation: sandbox `{'.'.join(map(str, err['loc']))}`: "
                       f"{err['msg']}") from None


@contextlib.asynccontextmanager
async def _sandbox_pool(env: EvalEnvironment, given: Any,
                        config: dict[str, Any]) -> AsyncIterator[SandboxPool | None]:
    """The run's sandbox pool (None without a sandbox); a factory given by the caller stays
    the caller's to close, one built from a block is closed here."""
    block = _sandbox_block(given, config)
    if block is None or getattr(block, "type", None) == "none":
        if needs_sandbox(env):
            raise NelError(f"run_evaluation: benchmark {env.name!r} runs model-written code and "
                           "needs a sandbox: pass sandbox={'type': 'local'} (or a docker block "
                           "with an image)")
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            if hasattr(block, "create"):
                factory, stateful = block, False
            else:
                factory = await stack.enter_async_context(open_factory(block))
                stateful = block.stateful
            # one sandbox up and down before the first model request (as `nel eval run`)
            async with running(factory.create(SandboxSpec())):
                pass
        except SandboxError as exc:
            raise NelError(f"run_evaluation: the sandbox cannot run: {exc}") from None
        yield SandboxPool(factory, stateful=stateful)


def write_all(bundle: dict[str, Any], output_dir: str | Path) -> dict[str, Path]:
    """Write a `run_evaluation` bundle's files into `output_dir`; their paths by kind.

    The files are the ones `nel eval run` exports (NeMo Evaluator's layout):
    `eval-<id>.json` (the bundle), `results.jsonl`, `trajectories.jsonl`,
    `runtime_stats.json`, `failure_analysis.json`. `nel compare` and `compare_runs`
    read them back.

    Raises:
        NelError: `bundle` is not one `run_evaluation` returned (it has no rows).
    """
    table = bundle.get("_table")
    if table is None:
        raise NelError("write_all: the bundle has no rows (pass the dict run_evaluation returned)")
    public = {k: v for k, v in bundle.items() if not k.startswith("_")}
    given = dict(public.get("config") or {})
    config = {**nf.run_config(public["benchmark"], model_id=public.get("model_id"), base_url=None,
                              repeats=int(public["score"].get("n_repeats") or 1), max_problems=None,
                              shuffle=None), **given}
    return write_exports(Path(output_dir).expanduser(), table, public, config=config, nel_config=given)
