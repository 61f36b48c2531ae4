"""Evaluate one shard, plan stale shards, and build a model's bundle: the functions the
Dagster assets (and nothing else) call. Pure Python: no Dagster import."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks import EvalEnvironment, get_benchmark
from benchmarks.errors import BenchmarkConfigError, DataMissingError, NelError
from benchmarks.plugins import load_module
from benchmarks.uri_schemes import is_uri
from nel_assets.engine.evaluation.interrupts import run_interruptibly
from nel_assets.engine.evaluation.journal import Journal
from nel_assets.engine.evaluation.sandboxing import FactoryOpener
from nel_assets.engine.evaluation.shard_file import LazySpill, file_batches, shard_summary
from nel_assets.engine.evaluation.sharding import select_problems, shard_bounds, shuffle_record
from nel_resources.config import ServiceConfig
from nel_resources.specs import (
    BenchmarkSpec,
    EnvironmentFactory,
    FingerprintInputs,
    ProblemSelection,
    RunSpec,
)
from nel_resources.storage.store import ResultStore, write_text_atomic

if TYPE_CHECKING:  # aiohttp loads when a shard runs: not for a plan or an unchanged rerun
    from nel_resources.model_client import ModelClient

_ENV_CACHE: dict[str, EvalEnvironment] = {}
_PROGRESS_HOOK: Callable[[int], None] | None = None


def set_progress_hook(hook: Callable[[int], None] | None) -> None:
    """Install the per-sample progress callback the CLI's progress bar listens to."""
    global _PROGRESS_HOOK
    _PROGRESS_HOOK = hook


def make_env(factory: EnvironmentFactory) -> EvalEnvironment:
    """Instantiate (and cache per process) the environment a factory describes."""
    if factory.module:
        load_module(factory.module)
    key = factory.cache_key()
    env = _ENV_CACHE.get(key)
    if env is None:
        params = dict(factory.params)
        try:
            if is_uri(factory.name, "container"):  # a harness image is the benchmark
                from nel_assets.engine.solvers.container_shard import HarnessEnvironment
                env = HarnessEnvironment(factory.name, params)
            else:
                env = get_benchmark(factory.name, hints=dict(factory.hints), **params)
        except TypeError as exc:
            raise NelError(f"benchmark {factory.benchmark!r}: bad params {params}: {exc}") from None
        _ENV_CACHE[key] = env
    return env


async def _prepare(env: EvalEnvironment) -> None:
    prep = getattr(env, "prepare", None)
    if prep is not None:
        await prep()


def problem_indices(env: EvalEnvironment, selection: ProblemSelection) -> list[int]:
    """All problem indices a benchmark's selection covers."""
    return select_problems(len(env), max_problems=selection.max_problems,
                           problem_range=selection.problem_range, shuffle_seed=selection.shuffle_seed)


def shard_indices(all_idx: list[int], shard: int, total: int) -> list[int]:
    """The contiguous slice of `all_idx` (the selection's order) owned by `shard`, in
    dataset order (a shard's identity is the set of its problems, not their order)."""
    lo, hi = shard_bounds(len(all_idx), shard, total)
    return sorted(all_idx[lo:hi])


async def seed_hash(env: EvalEnvironment, indices: list[int]) -> str:
    """Content hash of the seeds of `indices` (changes when any of that data changes)."""
    h = hashlib.sha256()
    for i in indices:
        s = await env.seed(i)
        h.update(orjson.dumps(s.to_dict(), option=orjson.OPT_SORT_KEYS, default=str))
    return h.hexdigest()[:16]


@dataclass
class ShardTask:
    """One (benchmark, model, shard) partition and whether it must run."""

    benchmark: str
    model: str
    shard: int
    total: int
    indices: list[int]
    fingerprint: str
    stored: dict[str, Any] | None = None
    seeds_digest: str = ""
    n_failed: int = 0  # stored samples whose request failed (a rerun retries them)

    @property
    def stale(self) -> bool:
        """Must run: no results yet, changed inputs, or failed samples to retry."""
        return self.reason is not None

    @property
    def reason(self) -> str | None:
        """Why the shard must run (None when it is up to date)."""
        if self.stored is None:
            return "no results yet"
        if self.stored.get("fingerprint") != self.fingerprint:
            return "inputs changed"
        if self.n_failed:
            return f"{self.n_failed} failed sample{'s' if self.n_failed != 1 else ''} to retry"
        return None


def shard_fingerprint(env: EvalEnvironment, inputs: FingerprintInputs, indices: list[int],
                      seeds_digest: str) -> str:
    """Everything that changes a shard's results, hashed."""
    payload = {
        "env": env.fingerprint(),
        "seeds": seeds_digest,
        # every index (a shuffled selection is not a range); the seed that picked them is
        # one of `inputs`: a changed seed reruns, as in NeMo Evaluator
        "indices": hashlib.sha256(json.dumps(indices).encode()).hexdigest()[:16],
        **inputs.payload(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def plan(store: ResultStore, bench: BenchmarkSpec) -> list[ShardTask]:
    """Every (model, shard) of a benchmark with its current fingerprint and stored state."""
    tasks: list[ShardTask] = []
    total = bench.shards
    for run in bench.runs:
        try:
            env = make_env(run.env)
        except DataMissingError:
            raise
        except NelError as exc:  # its parameters are wrong: a config error (see runner)
            raise BenchmarkConfigError(str(exc)) from None

        async def fingerprints(env: EvalEnvironment = env, run: RunSpec = run
                               ) -> list[tuple[list[int], str, str]]:
            await _prepare(env)
            all_idx = problem_indices(env, run.selection)
            out = []
            for s in range(total):
                idx = shard_indices(all_idx, s, total)
                digest = await seed_hash(env, idx)
                out.append((idx, shard_fingerprint(env, run.fingerprint, idx, digest), digest))
            return out

        for s, (idx, fp, digest) in enumerate(asyncio.run(fingerprints())):
            stored = store.shard_fingerprint(bench.name, run.model, s)
            tasks.append(ShardTask(bench.name, run.model, s, total, idx, fp, stored, digest,
                                   stored_failures(store, bench.name, run.model, s, stored)))
    return tasks


def stored_failures(store: ResultStore, bench: str, model: str, shard: int,
                    record: dict[str, Any] | None) -> int:
    """Failed samples (request errors) in a committed shard; 0 when there is none.

    Shards written before the count was recorded have it read from the Parquet `error`
    column (one column, cheap).
    """
    if record is None:
        return 0
    n = record.get("n_failed")
    if isinstance(n, int):
        return n
    import pyarrow.parquet as pq

    import nel_resources.storage.arrow  # noqa: F401 (pyarrow without pandas)

    try:
        col = pq.read_table(store.shard_path(bench, model, shard), columns=["error"]).column("error")
    except (OSError, KeyError, ValueError):
        return 0
    return col.length() - col.null_count


def make_client(service: ServiceConfig, base_url: str | None = None, *,
                timeout: float | None = None) -> ModelClient:
    """A model client for a service (the URL may come from a launched service); `timeout`
    is the benchmark's own, which overrides the service's."""
    from nel_resources.proxy.service_client import client_for_service

    return client_for_service(service, base_url, timeout=timeout)


@dataclass
class ShardOutcome:
    """What running one shard produced."""

    path: Path
    n_rows: int
    data_version: str
    requests_sent: int
    reused_from_journal: int
    mean_reward: float | None
    n_errors: int
    elapsed_s: float
    metadata: dict[str, Any] = field(default_factory=dict)


def evaluate_shard(
    run: RunSpec,
    store: ResultStore,
    shard: int,
    *,
    run_id: str | None = None,
    base_url: str | None = None,
    resume: bool = True,
    on_progress: Callable[[int], None] | None = None,
    sandboxes: FactoryOpener | None = None,
) -> ShardOutcome:
    """Run one shard of a (benchmark, model) run end to end and commit it to the store.

    `sandboxes` opens the benchmark's sandbox factory (the Dagster sandbox resource); by
    default it is made from `run.sandbox`. It is open for the shard and always closed.
    """
    t0 = time.perf_counter()
    on_progress = on_progress or _PROGRESS_HOOK
    svc = run.service.config
    bench_name, model = run.benchmark, run.model
    env = make_env(run.env)
    total = run.shards
    run_id = run_id or uuid.uuid4().hex[:12]
    if is_uri(run.benchmark, "container"):
        return _evaluate_harness(run, store, env, base_url, run_id, t0)
    selection: dict[str, Any] = {}  # the `shuffle` block, filled once the dataset is loaded

    # The loop pulls in the scorers; import it only when a shard actually runs.
    from nel_assets.engine.evaluation.budget import budget_for
    from nel_assets.engine.evaluation.judging import make_judge
    from nel_assets.engine.evaluation.loop import ShardSpec, needs_retry, run_shard
    from nel_assets.engine.evaluation.sandboxing import sandbox_pool
    from nel_assets.engine.results.provenance import prompt_identity, served_provenance
    from nel_assets.engine.solvers.factory import solver_for

    # Rows become Arrow record batches as they finish (pyarrow loads with the first batch,
    # after the first requests): the shard is never held as dicts.
    final = store.shard_path(bench_name, model, shard)
    builder = LazySpill(final)

    async def go() -> tuple[int, int, str, tuple[int, int] | None]:
        await _prepare(env)
        all_idx = problem_indices(env, run.selection)
        selection.update(shuffle_record(len(env), all_idx, shuffle_seed=run.selection.shuffle_seed,
                                        problem_range=run.selection.problem_range))
        idx = shard_indices(all_idx, shard, total)
        seeds["digest"] = await seed_hash(env, idx)
        fp = shard_fingerprint(env, run.fingerprint, idx, seeds["digest"])
        jpath = store.journal_path(bench_name, model, shard, fp)
        if not resume:
            jpath.unlink(missing_ok=True)
        # A committed shard with the same inputs is rerun only for its failed samples: its
        # other rows are kept as they are, and only the failed ones are requested again.
        reuse: list[dict[str, Any]] = []
        stored = store.shard_fingerprint(bench_name, model, shard) if resume else None
        if stored is not None and stored.get("fingerprint") == fp:
            reuse = [r for r in store.read_shards(bench_name, model, [shard]).to_pylist()
                     if not needs_retry(r)]
        prior = len(Journal.replay(jpath)) + len(reuse)
        journal = Journal(jpath)
        spec = ShardSpec(benchmark=bench_name, model=model, model_id=run.model_id,
                         shard=shard, indices=idx, repeats=run.repeats, run_id=run_id,
                         system_prompt=run.system_prompt, protocol=svc.protocol,
                         budget=budget_for(run.service.name, svc.pricing), image_detail=run.solver.image_detail,
                         image_dir=store.images_dir(bench_name))
        async with make_client(svc, base_url, timeout=run.timeout) as client, make_judge(run) as judge, \
                sandbox_pool(run, env, sandboxes) as pool:
            spec.judge = judge
            spec.sandboxes = pool
            spec.solver = solver_for(run.solver, client, system_prompt=run.system_prompt,
                                     services=run.tool_services, sandbox=run.sandbox,
                                     timeout=run.timeout, model_id=run.model_id,
                                     service=svc.model_copy(update={"url": base_url})
                                     if base_url else svc, env=env)
            try:
                prepare = getattr(spec.solver, "prepare", None)
                if idx and prepare is not None:
                    await prepare()  # tool sources listed, names checked: before any request
                if pool is not None:  # an agent that runs in the sandbox brings its mounts
                    pool.volumes = list(getattr(spec.solver, "sandbox_volumes", None) or [])
                    pool.reach_ports = tuple(getattr(spec.solver, "sandbox_ports", None) or ())
                if idx:
                    await client.check()
                    provenance.update(await served_provenance(svc, base_url, client, run.model_id))
                await run_shard(env, client, spec, journal=journal, reuse=reuse,
                                on_progress=on_progress, sink=builder.add)
            finally:
                await env.close()  # remote (gym://) environments hold an HTTP session
                close_tools = getattr(spec.solver, "close_tools", None)
                if close_tools is not None:
                    await close_tools()  # tool sources' HTTP sessions
            if client.chain is not None:
                await client.chain.close()  # commit cache writes before the stats are read
                chain_stats.update(client.chain.stats())
            return client.requests_sent, prior, fp, (idx[0], idx[-1] + 1) if idx else None

    chain_stats: dict[str, Any] = {}  # the interceptors' counters (cache hits, ...)
    provenance: dict[str, Any] = {}  # what answered (nel_resources/services/provenance.py)
    seeds: dict[str, str] = {}  # the shard's seed digest: its part of the dataset's hash
    # Ctrl-C and SIGTERM go through the loop: raised inside one of its callbacks, asyncio
    # would log the interrupt and carry on (interrupts.py).
    try:
        sent, prior, fp, idx_range = run_interruptibly(go())
        written = builder.write_sorted()
    except BaseException:
        builder.discard()
        raise
    try:
        data_version, n_rows, n_err, n_failed, reward_sum, n_rewards = shard_summary(
            file_batches(written), needs_retry)
    except BaseException:
        written.unlink(missing_ok=True)
        raise
    path = store.commit_shard_file(bench_name, model, shard, written, {
        "fingerprint": fp, "data_version": data_version, "n_rows": n_rows, "run_id": run_id,
        "n_failed": n_failed,
        "written_at": time.time(), "benchmark": bench_name, "model": model, "shard": shard,
        "total": total, "indices": [idx_range[0], idx_range[1]] if idx_range else None,
        "shuffle": selection, **({"interceptors": chain_stats} if chain_stats else {}),
        "seeds_digest": seeds.get("digest"), "prompt": prompt_identity(env, run),
        **({"provenance": provenance} if provenance else {}),
    })
    store.journal_path(bench_name, model, shard, fp).unlink(missing_ok=True)
    mean = reward_sum / n_rewards if n_rewards else None
    return ShardOutcome(path, n_rows, data_version, sent, prior, mean, n_err,
                        time.perf_counter() - t0)


def _evaluate_harness(run: RunSpec, store: ResultStore, env: EvalEnvironment, base_url: str | None,
                      run_id: str, t0: float) -> ShardOutcome:
    """A `container://` benchmark's one shard: the harness image runs the whole benchmark."""
    from nel_assets.engine.solvers.container_shard import run_container_shard
    from nel_resources.storage.schema import rows_to_table

    fp = shard_fingerprint(env, run.fingerprint, [], asyncio.run(seed_hash(env, [])))
    rows, summary = run_container_shard(run, base_url, run_id=run_id)
    data_version = hashlib.sha256(orjson.dumps(
        [summary.get("scores"), [(r["sample_id"], r.get("reward")) for r in rows]])).hexdigest()[:16]
    path = store.write_shard(run.benchmark, run.model, 0, rows_to_table(rows), {
        "fingerprint": fp, "data_version": data_version, "n_rows": len(rows), "run_id": run_id,
        "n_failed": 0, "written_at": time.time(), "benchmark": run.benchmark, "model": run.model,
        "shard": 0, "total": 1, "indices": None, "harness": summary})
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    mean = sum(rewards) / len(rewards) if rewards else summary["scores"][next(iter(summary["scores"]))]["value"]
    return ShardOutcome(path, len(rows), data_version, 0, 0, mean,
                        sum(1 for r in rows if r.get("error")), time.perf_counter() - t0,
                        {"harness": summary})


def _interceptor_stats(store: ResultStore, bench_name: str, model: str) -> dict[str, Any]:
    """The shards' interceptor counters, summed (cache hits, misses, saved tokens, ...)."""
    out: dict[str, Any] = {}
    for rec in store.shard_records(bench_name, model).values():
        for k, v in (rec.get("interceptors") or {}).items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "mean_latency_ms":
                out[k] = out.get(k, 0) + v
    return out


def export_eval_id(bench_name: str, model: str, run_ids: list[str]) -> str:
    """The id in `eval-<id>.json`: changes whenever the runs behind the bundle change."""
    return hashlib.sha256(f"{bench_name}:{model}:{','.join(run_ids)}".encode()).hexdigest()[:12]


def _shard_versions(store: ResultStore, bench_name: str, model: str) -> dict[str, str]:
    return {str(s): str(rec.get("data_version")) for s, rec in store.shard_records(bench_name, model).items()}


def _nemo_config(run: RunSpec | None, bench_name: str, bundle: dict[str, Any],
                 shuffle: dict[str, Any] | None) -> dict[str, Any]:
    """The bundle's `config` as NeMo Evaluator 0.3.0 writes it (its `eval merge` reads
    `repeats` and `benchmark` there)."""
    from nel_assets.engine.nemo import nemo_format as nf

    repeats = int(bundle["score"].get("n_repeats") or 1)
    if run is None:
        return nf.run_config(bench_name, model_id=bundle.get("model_id"), base_url=None,
                             repeats=repeats, max_problems=None, shuffle=shuffle)
    cfg = run.service.config
    gen = cfg.generation
    return nf.run_config(bench_name, model_id=run.model_id, base_url=cfg.url, repeats=run.repeats,
                         max_problems=run.selection.max_problems, shuffle=shuffle,
                         generation={"temperature": gen.temperature, "max_tokens": gen.max_tokens,
                                     "top_p": gen.top_p, "seed": gen.seed},
                         system_prompt=run.system_prompt)


# Rows decoded per batch for the exports. Measured on a 10,552-row GSM8K shard (the line
# files alone, in a warm process): 256 rows peak at +0 MB of RSS and 0.155 s of CPU; 1,024
# rows at +24 MB and 0.18 s (a batch's decoded strings and Python objects are not small, and
# in a nel daemon's fork, where Dagster's memory is there from the start, those 24 MB were
# the run's peak).
_EXPORT_BATCH_ROWS = 256


def _line_columns(nel_config: dict[str, Any]) -> tuple[str, ...]:
    """The stored columns the export lines read: the request messages only when the
    trajectories keep them (`output.trajectory_messages`), as they are the longest text."""
    from nel_assets.engine.nemo.nemo_lines import LINE_COLUMNS

    if (nel_config.get("output") or {}).get("trajectory_messages"):
        return LINE_COLUMNS
    return tuple(c for c in LINE_COLUMNS if c != "messages")


def build_model_bundle(run: RunSpec | None, store: ResultStore, bench_name: str,
                       model: str, *, config_json: str | None = None
                       ) -> tuple[dict[str, Any], dict[str, Path]]:
    """Read every committed shard of (benchmark, model), write report, exports and bundle.

    Every file is written atomically, and the bundle last: it records the shard versions it
    was built from, so `artifact_problems` can tell a bundle left behind by a crash.

    Args:
        run: the configured run of (benchmark, model), when there is one (its model id and
            shard count go into the bundle); None for results merged from elsewhere.
        store: the result store.
        bench_name: the benchmark.
        model: the model partition key.
        config_json: the run's config without secrets (`ResolvedConfig.config_json`),
            written into the exports.
    """
    from nel_assets.engine.nemo.exports import move_other_model_exports, write_exports
    from nel_assets.engine.reports.report import render_markdown
    from nel_assets.engine.results.bundle import (
        BUNDLE_COLUMNS,
        DICTIONARY_COLUMNS,
        TEXT_COLUMNS,
        build_bundle,
        bundle_row,
    )
    from nel_assets.engine.results.cost import bundle_cost
    from nel_assets.engine.results.provenance import bundle_provenance

    # The bundle's columns only, read a column at a time as each statistic needs it (never
    # the whole table at once), without the long per-row texts (streamed where needed) and
    # with the repeated ones dictionary-encoded. The exports stream every column themselves.
    table = store.shard_columns(bench_name, model, columns=[c for c in BUNDLE_COLUMNS if c not in TEXT_COLUMNS],
                                dictionary=DICTIONARY_COLUMNS)

    def texts(columns: tuple[str, ...]) -> Any:
        return store.iter_shard_batches(bench_name, model, batch_size=4096, columns=columns)

    harness = next((r["harness"] for r in store.shard_records(bench_name, model).values()
                    if r.get("harness")), None)
    if table.num_rows == 0 and harness is None:
        raise NelError(f"{bench_name}/{model}: no shard results to bundle yet")
    model_id = run.service.config.model if run is not None else None
    expected_shards = run.shards if run is not None else None
    present = sorted({int(s) for s in table.column("shard").unique().to_pylist() if s is not None})
    extra = {"shards_expected": expected_shards,
             "complete": expected_shards is None or present == list(range(expected_shards)),
             "shard_versions": _shard_versions(store, bench_name, model)}
    # NeMo Evaluator records which items max_problems picked as config.shuffle(_seed)
    shuffle = next((r["shuffle"] for r in store.shard_records(bench_name, model).values()
                    if r.get("shuffle")), None)
    if shuffle:
        extra.update({"shuffle": shuffle, "shuffle_seed": shuffle.get("seed")})
    extra["provenance"] = bundle_provenance(run, store.shard_records(bench_name, model))
    cost = bundle_cost(table, run.service.config.pricing if run is not None else None)
    if cost is not None:
        extra["cost"] = cost
    bundle = build_bundle(table, benchmark=bench_name, model=model, model_id=model_id, extra=extra,
                          texts=texts)
    if harness is not None:  # a container:// harness: its scores, as it reported them
        from nel_assets.engine.solvers.container_shard import harness_bundle_score

        bundle["harness"] = harness
        if table.num_rows == 0:
            bundle["score"] = harness_bundle_score(harness)
    chain = _interceptor_stats(store, bench_name, model)
    if chain:  # runtime_stats.json is written from bundle["runtime"]
        bundle["runtime"]["interceptors"] = chain
    write_text_atomic(store.report_dir(bench_name, model) / "report.md", render_markdown([bundle]))
    summary = json.loads(config_json) if config_json is not None else {}
    if shuffle:
        summary.update({"shuffle": shuffle, "shuffle_seed": shuffle.get("seed")})
    edir = store.export_dir(bench_name, model)
    if edir != store.bench_dir(bench_name):  # a second model: the first one's files move
        move_other_model_exports(store.bench_dir(bench_name), model,
                                 lambda owner: store.export_dir(bench_name, owner))
    paths = write_exports(edir, table, bundle, config=_nemo_config(run, bench_name, bundle, shuffle),
                          nel_config=summary,
                          sweep=(store.legacy_export_dir(bench_name, model), store.bench_dir(bench_name)),
                          batches=lambda start: store.iter_shard_batches(
                              bench_name, model, batch_size=_EXPORT_BATCH_ROWS, columns=_line_columns(summary),
                              start_row=start))
    store.write_bundle(bench_name, model, bundle, bundle_row(bundle))
    from nel_assets.engine.results.verified_files import remember_exports

    remember_exports(store, bench_name, model, paths, table.num_rows)  # the next run skips reading them
    return bundle, paths


def artifact_problems(store: ResultStore, bench_name: str, model: str) -> list[str]:
    """What is wrong with the bundle, report and exports of (benchmark, model).

    Empty when every artifact exists, is complete and matches the committed shards. Cheap:
    JSON parses, JSONL line counts, a Parquet footer; no request, no rewrite. A non-empty
    answer means the bundle asset must be rebuilt from the store (`nel eval run` does that
    without sending a model request).
    """
    from nel_assets.engine.nemo import nemo_format as nf
    from nel_assets.engine.nemo.exports import eval_file_name
    from nel_assets.engine.results.artifacts import (
        json_problem,
        jsonl_problem,
        parquet_problem,
        read_json,
        text_problem,
    )
    from nel_assets.engine.results.bundle import BUNDLE_VERSION
    from nel_assets.engine.results.verified_files import RECORD_NAME, VerifiedFiles

    records = store.shard_records(bench_name, model)
    if not records:
        return []  # nothing committed yet: the shards run first
    bdir = store.bundle_dir(bench_name, model)
    problems: list[str] = []
    bundle = read_json(bdir / "bundle.json")
    if not isinstance(bundle, dict) or "score" not in bundle:
        problems.append(f"{bdir / 'bundle.json'}: " + (json_problem(bdir / "bundle.json") or "no score"))
        bundle = None
    elif bundle.get("shard_versions") != {str(s): str(r.get("data_version")) for s, r in records.items()}:
        problems.append(f"{bdir / 'bundle.json'}: older than the shard results")
    elif bundle.get("bundle_version") != BUNDLE_VERSION:
        # A bundle of an older nel (e.g. its CI from another interval method) is rebuilt so
        # every surface shows the current statistics.
        problems.append(f"{bdir / 'bundle.json'}: bundle format {bundle.get('bundle_version')}, "
                        f"this nel writes {BUNDLE_VERSION}")
    checks: list[tuple[Path, str | None]] = [
        (bdir / "bundle.parquet", parquet_problem(bdir / "bundle.parquet")),
        (store.report_dir(bench_name, model) / "report.md",
         text_problem(store.report_dir(bench_name, model) / "report.md")),
    ]
    edir = store.export_dir(bench_name, model)
    if bundle is not None:
        ev = edir / eval_file_name(bundle)
        checks.append((ev, json_problem(ev, require=nf.BUNDLE_KEYS)))
        if (bundle.get("failures") or {}).get("categories"):
            checks.append((edir / "failure_analysis.json", json_problem(edir / "failure_analysis.json",
                                                                         require=nf.FAILURE_KEYS)))
    n_rows = sum(int(r.get("n_rows") or 0) for r in records.values())
    # The JSONL exports grow with the run: one that passed before and is unchanged since
    # (same stat) is not read again (verified_files).
    verified = VerifiedFiles(bdir / RECORD_NAME)
    for name in ("results.jsonl", "trajectories.jsonl"):
        path = edir / name
        checks.append((path, verified.check(path, n_rows, lambda p=path: jsonl_problem(p, n_rows))))
    verified.save()
    checks.append((edir / "runtime_stats.json", json_problem(edir / "runtime_stats.json")))
    problems += [f"{path}: {why}" for path, why in checks if why is not None]
    return problems
