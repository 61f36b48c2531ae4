"""Resolved run specs: a `NelConfig` resolved once into what the engine and assets need.

`resolve(cfg)` does every look-up by name (a benchmark's services, the judge services of
its scoring metrics, `gym://` services, the comparison baseline) and returns a
`ResolvedConfig`: one `BenchmarkSpec` per benchmark holding one `RunSpec` per model
partition, plus what is global to the run (output dir, data dir, comparison, checkpoints).
Below `dagster_project` nothing looks a service up by name again: the factory, the assets
and the engine take specs.

Specs are plain frozen data. Building the benchmark environment from an
`EnvironmentFactory` is the engine's job (`nel_assets.engine.evaluation.evaluate.make_env`): this
layer imports no benchmark code and no Dagster.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from benchmarks.errors import NelError
from benchmarks.prompt_sets import follows_nemo
from benchmarks.uri_schemes import is_uri
from nel_resources.config import (
    BenchmarkConfig,
    CheckpointsConfig,
    ClusterConfig,
    InterceptorConfig,
    NelConfig,
    SandboxConfig,
    ScoringConfig,
    ScoringMetric,
    ServiceConfig,
    SolverConfig,
)
from nel_resources.config.deployment import NodePool
from nel_resources.storage.store import asset_name, slugify

#: The solver a benchmark uses unless it names another (`solver.type`).
DEFAULT_SOLVER = "simple"


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


def service_resource_key(service_name: str) -> str:
    """Dagster resource key of a service (`svc_<slug>`)."""
    return "svc_" + asset_name(slugify(service_name)).lower()


def sandbox_resource_key(benchmark: str) -> str:
    """Dagster resource key of a benchmark's sandbox block (`sandbox_<slug>`)."""
    return "sandbox_" + asset_name(slugify(benchmark)).lower()


def env_protocol(service: ServiceConfig) -> str:
    """The prompt style a service needs: completions endpoints get completion prompts."""
    return "completions" if service.protocol == "completions" else "chat"


@dataclass(frozen=True)
class ServiceSpec:
    """A configured service under its name, with its Dagster resource key."""

    name: str
    config: ServiceConfig
    resource_key: str

    @property
    def model_partition(self) -> str:
        """The `model` partition key of this service (its slug)."""
        return slugify(self.name)


@dataclass(frozen=True)
class EnvironmentFactory:
    """How to build one benchmark environment (the engine's `make_env` builds it).

    Attributes:
        benchmark: the benchmark's name as written in the config (used in errors).
        name: the registry name to instantiate (`gym://host:port` once a `gym://<service>`
            name is resolved to that service's URL).
        module: a BYOB file or module to import first, so `name` is registered.
        params: keyword arguments of the environment (few-shot count, gym timeout/retries,
            and the benchmark's own `params`).
        hints: arguments offered, not imposed (the prompt `protocol` the service needs): an
            environment whose `__init__` does not take one still runs.
    """

    benchmark: str
    name: str
    module: str | None
    params: Mapping[str, Any]
    hints: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def cache_key(self) -> str:
        """Identity of the environment this factory builds (one instance per process)."""
        return self.name + json.dumps({**self.hints, **self.params}, sort_keys=True, default=str)


@dataclass(frozen=True)
class ProblemSelection:
    """Which problems of the environment a benchmark covers."""

    max_problems: int | None = None
    problem_range: tuple[int, int] | None = None
    shuffle_seed: int | None = None  # NeMo Evaluator's shuffle before max_problems; None = dataset order


@dataclass(frozen=True)
class JudgeSpec:
    """A `type: judge` scoring metric with its judge service resolved."""

    metric: ScoringMetric
    service_name: str
    service: ServiceConfig
    # The judge is another service name for the solver's own endpoint and model: allowed (as
    # NeMo Evaluator's own examples do it), but the run says so (`self_judging_warnings`).
    same_model_as_solver: bool = False


@dataclass(frozen=True)
class FingerprintInputs:
    """What a shard fingerprint hashes besides the environment, seeds and indices.

    Kept exactly as the engine hashed it before specs existed, so result stores written
    by earlier versions stay fresh.
    """

    repeats: int
    service_settings: str
    system_prompt: str | None
    scoring: Mapping[str, Any] | None
    shuffle_seed: int | None = None  # the seed that picked the items (None with a range)
    # The sandbox settings that can change a verdict (type, image, limits), when the
    # benchmark has a sandbox; absent from the payload otherwise (older stores stay fresh).
    sandbox: Mapping[str, Any] | None = None
    # An agentic solver's settings (type, tools, turns, ...); None (and absent from the
    # payload) for the simple solver, so stores written before solvers existed stay fresh.
    solver: Mapping[str, Any] | None = None

    def payload(self) -> dict[str, Any]:
        """The JSON-able part of the shard fingerprint payload these inputs contribute."""
        out = {"repeats": self.repeats, "service": self.service_settings,
               "shuffle_seed": self.shuffle_seed,
               "system_prompt": self.system_prompt,
               "scoring": None if self.scoring is None else dict(self.scoring)}
        if self.sandbox is not None:
            out["sandbox"] = dict(self.sandbox)
        if self.solver is not None:
            out["solver"] = dict(self.solver)
        return out


@dataclass(frozen=True)
class RunSpec:
    """One benchmark × model partition: everything a shard of it needs to run.

    Attributes:
        benchmark: benchmark name.
        model: the `model` partition key (slug of the service name).
        model_id: the real model id recorded in rows (`model:` of the service, else its name).
        service: the resolved service (URL, key resolution, generation, timeouts), with the
            benchmark's `max_concurrent` applied as a cap on its requests in flight.
        env: how to build the benchmark environment for this service.
        selection: max_problems / problem_range.
        repeats: samples per problem.
        system_prompt: the benchmark's system prompt, else the service's.
        timeout: the benchmark's per-request timeout (overrides the service's), or None.
        shards: the shard count of the benchmark.
        solver: the benchmark's solver block (`type: simple` unless it names another;
            `check_supported` refuses the others until they land).
        sandbox: the benchmark's sandbox block (a `sandboxes:` name is resolved by the
            config loader), or None.
        interceptors: the service's interceptor chain (`interceptors:`, then
            `proxy.interceptors`); empty unless configured.
        prompt_set: `nemo` (NeMo Evaluator 0.3.0's request) or `nel` (nel's prompts); it
            changes the request of the built-ins both tools ship only.
        scoring: the benchmark's `scoring` block, or None.
        judges: the judge metrics of `scoring` with their services resolved.
        fingerprint: the non-environment inputs of the shard fingerprint.
    """

    benchmark: str
    model: str
    model_id: str
    service: ServiceSpec
    env: EnvironmentFactory
    selection: ProblemSelection
    repeats: int
    system_prompt: str | None
    timeout: float | None
    shards: int
    scoring: ScoringConfig | None
    judges: tuple[JudgeSpec, ...]
    fingerprint: FingerprintInputs
    solver: SolverConfig = field(default_factory=SolverConfig)
    sandbox: SandboxConfig | None = None
    # The node pool the sandbox's allocations go to (`sandboxes.<n>.node_pool`), resolved
    # from `cluster.node_pools` here so the factory never reads the config again.
    sandbox_pool: NodePool | None = None
    interceptors: tuple[InterceptorConfig, ...] = ()
    # Services an agentic solver's tools come from (`solver.resource_service`), by name.
    tool_services: Mapping[str, ServiceConfig] = field(default_factory=dict)
    # Whose prompts the benchmark sends (`prompt_set`: nemo or nel); the environment's
    # fingerprint carries it, and bundles record it as the run's prompt identity.
    prompt_set: str = "nemo"


@dataclass(frozen=True)
class CodeVersionInputs:
    """A benchmark's results-affecting settings that go into its Dagster `code_version`
    (with the fingerprints of its environments)."""

    repeats: int
    shards: int
    max_problems: int | None
    problem_range: tuple[int, int] | None
    scoring: Mapping[str, Any] | None

    def payload(self) -> dict[str, Any]:
        """The JSON-able payload (as hashed before specs existed)."""
        return {"repeats": self.repeats, "shards": self.shards, "max_problems": self.max_problems,
                "problem_range": self.problem_range,
                "scoring": None if self.scoring is None else dict(self.scoring)}


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark and its runs, one per model partition (in config order)."""

    name: str
    asset_name: str
    shards: int
    runs: tuple[RunSpec, ...]
    code_version_inputs: CodeVersionInputs
    requires_services: tuple[str, ...] = ()  # resource keys of every service it runs on

    @property
    def repeats(self) -> int:
        """Samples per problem."""
        return self.code_version_inputs.repeats

    @property
    def models(self) -> tuple[str, ...]:
        """The model partition keys this benchmark runs on."""
        return tuple(r.model for r in self.runs)

    @property
    def sandbox(self) -> SandboxConfig | None:
        """The benchmark's sandbox block (the same for every model), if it has a real one."""
        sb = self.runs[0].sandbox if self.runs else None
        return sb if sb is not None and sb.type != "none" else None

    @property
    def sandbox_pool(self) -> NodePool | None:
        """The node pool of the benchmark's sandbox block (`node_pool`), if it names one."""
        return self.runs[0].sandbox_pool if self.runs and self.sandbox is not None else None

    def run_for(self, model: str) -> RunSpec | None:
        """The run of model partition `model`, or None when this benchmark does not run it."""
        for r in self.runs:
            if r.model == model:
                return r
        return None


@dataclass(frozen=True)
class ComparisonSpec:
    """The comparison asset's settings: baseline partition, gate policy file, max drop."""

    baseline_name: str | None
    baseline: str | None  # the baseline's model partition key
    policy: str | None
    max_drop: float | None
    settings_json: str  # canonical JSON of `comparison:` (its code version hashes it)


@dataclass(frozen=True)
class ResolvedConfig:
    """A config resolved once: every benchmark's runs plus what is global to the run.

    It does not carry the `NelConfig` it came from: what the assets, the engine and the
    launchers need is here, and the run's orchestration (`dagster_project`: saving the
    effective config, the checkpoint sensor resolving again with new services) holds the
    config itself.
    """

    benchmarks: tuple[BenchmarkSpec, ...]
    services: Mapping[str, ServiceSpec]
    used_services: tuple[str, ...]  # names of the services some benchmark runs on
    output_dir: str
    dagster_home: str | None
    data_dir: str | None
    comparison: ComparisonSpec
    checkpoints: CheckpointsConfig
    config_json: str  # canonical JSON without secrets (written into exports)
    cluster: ClusterConfig  # where the partitions run (the launcher's block)
    #: BYOB modules the benchmarks load (a cluster's workers must be able to read them)
    module_paths: tuple[str, ...] = field(default=())
    model_partitions: tuple[str, ...] = field(default=())  # slugs of every `role: model` service
    #: benchmarks of a suite that cannot run as configured (name -> the one-line reason): they
    #: fail alone, recorded in checkpoint.json, while the others run (NeMo Evaluator's suites)
    unrunnable: Mapping[str, str] = field(default_factory=dict)

    def benchmark(self, name: str) -> BenchmarkSpec | None:
        """The benchmark spec named `name`, or None."""
        for b in self.benchmarks:
            if b.name == name:
                return b
        return None

    @property
    def models(self) -> tuple[str, ...]:
        """Every model partition some benchmark runs on (sorted, no duplicates)."""
        return tuple(sorted({r.model for b in self.benchmarks for r in b.runs}))


# --------------------------------------------------------------------------- resolution


def _gym_env(bench: BenchmarkConfig, services: Mapping[str, ServiceConfig]) -> tuple[str, dict[str, Any]]:
    """`gym://<service>` names a `type: gym` service: its URL, timeout and retries."""
    params = dict(bench.params)
    target = bench.name[len("gym://"):]
    svc = services.get(target)
    if svc is None or svc.type != "gym":
        return bench.name, params  # a literal gym://host:port
    if not svc.url:
        raise NelError(f"gym service {target!r} has no url")
    params.setdefault("timeout", svc.timeout)
    params.setdefault("retries", svc.max_retries)
    return "gym://" + svc.url.split("://", 1)[-1].rstrip("/"), params


def environment_factory(bench: BenchmarkConfig, service: ServiceConfig,
                        services: Mapping[str, ServiceConfig]) -> EnvironmentFactory:
    """How to build `bench`'s environment for `service` (`services` resolves `gym://` names)."""
    hints: dict[str, Any] = {}
    if is_uri(bench.name, "gym"):
        name, params = _gym_env(bench, services)
    else:
        name, params = bench.name, dict(bench.params)
        if "protocol" not in params:
            hints["protocol"] = env_protocol(service)
        hints["prompt_set"] = bench.prompt_set
        # NeMo Evaluator's request has no few-shot turns (`dropped_by_nemo_prompts` says so).
        if bench.num_fewshot is not None and not _sends_nemo_request(bench):
            params["num_fewshot"] = bench.num_fewshot
    return EnvironmentFactory(bench.name, name, bench.module, _frozen(params), _frozen(hints))


def _sends_nemo_request(bench: BenchmarkConfig) -> bool:
    return follows_nemo(bench.name, bench.prompt_set, module=bench.module)


def dropped_by_nemo_prompts(cfg: NelConfig) -> list[str]:
    """One line per benchmark whose system prompt or few-shot count is not sent because it
    sends NeMo Evaluator 0.3.0's request (`prompt_set: nemo`), which has neither: 0.3.0
    drops them without a word; nel says so and names the switch that sends them."""
    out = []
    for bench in cfg.benchmarks:
        if not _sends_nemo_request(bench):
            continue
        names = bench.service_names(cfg.services)
        dropped = []
        if bench.system_prompt or any(cfg.services[n].system_prompt for n in names if n in cfg.services):
            dropped.append("system prompt")
        if bench.num_fewshot:
            dropped.append(f"few-shot turns (fewshot: {bench.num_fewshot})")
        if dropped:
            out.append(f"note: {bench.name}: prompt_set nemo sends NeMo Evaluator 0.3.0's request, "
                       f"which has no {' and no '.join(dropped)}; set `prompt_set: nel` (or "
                       "--prompt-set nel) to send nel's prompts with them")
    return out


def _judge_service(bench: BenchmarkConfig, metric: ScoringMetric, solver: str,
                   services: Mapping[str, ServiceConfig]) -> JudgeSpec:
    name = metric.service
    known = ", ".join(services) or "none defined"
    if name is None:
        judges = [n for n, s in services.items() if s.role == "judge"]
        if len(judges) != 1:
            raise NelError(
                f"{bench.name}: judge metric {metric.name!r} has no `service`; name one of the "
                f"services ({known})")
        name = judges[0]
    if name not in services:
        raise NelError(
            f"{bench.name}: judge metric {metric.name!r} uses service {name!r}, which is not in "
            f"`services` ({known})")
    svc = services[name]
    solver_svc = services.get(solver)
    same_endpoint = (solver_svc is not None and svc.url is not None and svc.url == solver_svc.url
                     and svc.model == solver_svc.model)
    if name == solver and not metric.allow_self_judge:
        raise NelError(
            f"{bench.name}: judge metric {metric.name!r} would be graded by the model under test "
            f"(service {solver!r}); use a different judge service, or set "
            "`allow_self_judge: true` on the metric if that is really intended")
    return JudgeSpec(metric, name, svc,
                     same_model_as_solver=same_endpoint and not metric.allow_self_judge)


def self_judging_warnings(resolved: ResolvedConfig) -> list[str]:
    """One line per judge that is the model under test under another service name."""
    out = []
    for bench in resolved.benchmarks:
        for run in bench.runs:
            for judge in run.judges:
                if judge.same_model_as_solver:
                    out.append(
                        f"warning: {bench.name}/{run.model}: judge metric {judge.metric.name!r} "
                        f"(service {judge.service_name!r}) is the model under test (same URL and "
                        "model): it grades its own answers; use another judge model, or set "
                        "`allow_self_judge: true` on the metric to silence this")
    return out


def judge_metrics(scoring: ScoringConfig | None) -> list[ScoringMetric]:
    """The `type: judge` metrics of a scoring block."""
    return [m for m in (scoring.metrics if scoring else []) if m.type == "judge"]


def n_shards(cfg: NelConfig, bench: BenchmarkConfig) -> int:
    """Shards of a benchmark: the benchmark's own count, else the cluster's."""
    return bench.shards if bench.shards > 1 else (cfg.cluster.shards or 1)


#: Sandbox keys that can change a program's verdict (not how many run at once, nor secrets).
_SANDBOX_VERDICT_KEYS = ("type", "image", "image_template", "memory", "cpus", "cpu", "network",
                         "timeout", "verify_timeout", "stateful")


def solver_fingerprint(solver: SolverConfig) -> Mapping[str, Any] | None:
    """What of an agentic solver block goes into the shard fingerprint (None for simple)."""
    if solver.type == "simple":
        # only a non-default image detail: stores written before images existed stay fresh
        return None if solver.image_detail == "auto" else _frozen({"image_detail": solver.image_detail})
    data = solver.model_dump(mode="json", exclude_defaults=True)
    if solver.config_path and os.path.isfile(cfg_file := os.path.expanduser(solver.config_path)):
        with open(cfg_file, "rb") as f:  # the user's openclaw.json: its content reruns too
            data["config_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return _frozen(data)


def sandbox_fingerprint(sandbox: SandboxConfig | None) -> Mapping[str, Any] | None:
    """What of a sandbox block goes into the shard fingerprint (None without a sandbox)."""
    if sandbox is None or sandbox.type == "none":
        return None
    data = sandbox.model_dump(mode="json")
    return _frozen({k: data[k] for k in _SANDBOX_VERDICT_KEYS})


def service_fingerprint(svc: ServiceConfig) -> str:
    """Hash of what changes a service's answers (not its URL or key): model, protocol,
    generation settings, system prompt, weights, and the interceptors that can change
    answers (observers like `caching` or `logging` are left out: adding one must not rerun
    finished shards; the proxy's registry says which is which)."""

    from nel_resources.proxy.registry import affects_answers

    payload: dict[str, Any] = {
        "model": svc.model,
        "protocol": svc.protocol,
        "generation": svc.generation.model_dump(),
        "system_prompt": svc.system_prompt,
        "model_path": svc.model_path,
    }
    items = [*svc.interceptors, *(svc.proxy.interceptors if svc.proxy else ())]
    chain = [{"name": i.name, "config": i.config} for i in items if affects_answers(i.name)]
    if chain:  # only when set, so fingerprints of chain-less services stay as they were
        payload["interceptors"] = chain
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _run_spec(cfg: NelConfig, bench: BenchmarkConfig, svc_name: str, shards: int,
              scoring_dump: Mapping[str, Any] | None) -> RunSpec:
    if svc_name not in cfg.services:
        known = ", ".join(sorted(cfg.services)) or "none defined"
        raise NelError(f"benchmark {bench.name!r} uses service {svc_name!r}, which is not in "
                       f"`services` ({known})")
    svc = cfg.services[svc_name]
    system_prompt = bench.system_prompt if bench.system_prompt is not None else svc.system_prompt
    if _sends_nemo_request(bench):  # 0.3.0's built-ins send none (`dropped_by_nemo_prompts`)
        system_prompt = None
    judges = tuple(_judge_service(bench, m, svc_name, cfg.services) for m in judge_metrics(bench.scoring))
    # A benchmark's `max_concurrent` caps the service's requests in flight (not a setting
    # that changes answers: the fingerprint reads the service as configured).
    capped = svc if bench.max_concurrent is None else svc.model_copy(
        update={"max_concurrent": min(svc.max_concurrent, bench.max_concurrent)})
    interceptors = (*svc.interceptors, *(svc.proxy.interceptors if svc.proxy else ()))
    from nel_resources.agent_sandbox import effective_sandbox

    sandbox = effective_sandbox(bench)  # a Harbor task of a Gym agent gets nel's docker box
    return RunSpec(
        benchmark=bench.name, model=slugify(svc_name), model_id=svc.model or svc_name,
        service=ServiceSpec(svc_name, capped, service_resource_key(svc_name)),
        env=environment_factory(bench, svc, cfg.services),
        selection=ProblemSelection(bench.max_problems, bench.problem_range, bench.shuffle_seed),
        repeats=bench.repeats, system_prompt=system_prompt, timeout=bench.timeout, shards=shards,
        scoring=bench.scoring, judges=judges,
        fingerprint=FingerprintInputs(bench.repeats, service_fingerprint(svc), system_prompt,
                                      scoring_dump,
                                      bench.shuffle_seed if bench.problem_range is None else None,
                                      sandbox_fingerprint(sandbox),
                                      solver_fingerprint(bench.solver)),
        solver=bench.solver, sandbox=sandbox, interceptors=tuple(interceptors),
        sandbox_pool=(cfg.cluster.node_pools.get(sandbox.node_pool)
                      if sandbox is not None and sandbox.node_pool else None),
        tool_services=_tool_services(cfg, bench), prompt_set=bench.prompt_set,
    )


def _tool_services(cfg: NelConfig, bench: BenchmarkConfig) -> Mapping[str, ServiceConfig]:
    """The Gym services an agentic solver talks to: `resource_service`, `gym_service`."""
    found: dict[str, ServiceConfig] = {}
    for key in ("resource_service", "gym_service"):
        name = getattr(bench.solver, key)
        if not name:
            continue
        if name not in cfg.services:
            known = ", ".join(sorted(cfg.services)) or "none defined"
            raise NelError(f"benchmark {bench.name!r}: solver.{key} {name!r} is not in "
                           f"`services` ({known})")
        found[name] = cfg.services[name]
    return _frozen(found)


def resolve_benchmark(cfg: NelConfig, bench: BenchmarkConfig) -> BenchmarkSpec:
    """Resolve one benchmark of `cfg` into its spec (every service and judge by name)."""
    shards = n_shards(cfg, bench)
    scoring_dump = _frozen(bench.scoring.model_dump()) if bench.scoring else None
    names = bench.service_names(cfg.services)
    runs = tuple(_run_spec(cfg, bench, s, shards, scoring_dump) for s in names)
    return BenchmarkSpec(
        name=bench.name, asset_name=asset_name(bench.name), shards=shards, runs=runs,
        code_version_inputs=CodeVersionInputs(bench.repeats, shards, bench.max_problems,
                                              bench.problem_range, scoring_dump),
        requires_services=tuple(service_resource_key(s) for s in names),
    )


def resolve(cfg: NelConfig) -> ResolvedConfig:
    """Resolve `cfg` once into run specs.

    Raises:
        NelError: a name that does not resolve (a benchmark's or a judge metric's service,
            a `gym://` service without a URL) or a judge that is the model under test;
            one line saying what to write instead.
    """
    benches = tuple(resolve_benchmark(cfg, b) for b in cfg.benchmarks)
    used = []
    for b in cfg.benchmarks:
        for s in b.service_names(cfg.services):
            if s not in used:
                used.append(s)
    comp = cfg.comparison
    return ResolvedConfig(
        benchmarks=benches,
        services=_frozen({n: ServiceSpec(n, s, service_resource_key(n)) for n, s in cfg.services.items()}),
        used_services=tuple(used), output_dir=cfg.output.dir, dagster_home=cfg.output.dagster_home,
        data_dir=cfg.data_dir,
        comparison=ComparisonSpec(
            baseline_name=comp.baseline, baseline=slugify(comp.baseline) if comp.baseline else None,
            policy=comp.policy, max_drop=comp.max_drop,
            settings_json=json.dumps(comp.model_dump(mode="json"), sort_keys=True)),
        checkpoints=cfg.checkpoints, config_json=cfg.fingerprint_json(), cluster=cfg.cluster,
        module_paths=tuple(b.module for b in cfg.benchmarks if b.module),
        model_partitions=tuple(slugify(n) for n, s in cfg.services.items() if s.role == "model"),
    )
