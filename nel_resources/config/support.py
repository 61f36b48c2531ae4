"""`check_supported`: refuse, before any request, config keys whose feature nel lacks yet.

`load_config` accepts every NeMo Evaluator 0.3.0 key (so `--dry-run` can show the plan);
this check is what stops a run from silently ignoring one or doing something else. Each
refusal is one line: `file:line: key <path>: <feature> is not supported yet in nel; <what
to do instead>`. Later issues remove entries as the features land.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from benchmarks.uri_schemes import is_uri
from nel_resources.config._base import ConfigError, field_defaults
from nel_resources.config.benchmarks import BenchmarkConfig, SandboxConfig, ScoringMetric
from nel_resources.config.model import NelConfig
from nel_resources.config.services import LAUNCHED_TYPES, ServiceConfig
from nel_resources.exporters import is_built

# Benchmark URI schemes of external harnesses NeMo Evaluator runs; nel has none of them.
_HARNESS_SCHEMES = {
    "lm-eval": "lm-evaluation-harness tasks", "skills": "NeMo Skills benchmarks",
    "harbor": "Harbor agent datasets", "container": "legacy eval-factory containers",
    "vlmevalkit": "VLMEvalKit benchmarks",
}
# The same benchmark built into nel, for names a NeMo Evaluator config may use.
_NEL_EQUIVALENT = {
    "lm-eval://mmlu_generative": "mmlu", "lm-eval://mmlu": "mmlu", "lm-eval://gsm8k": "gsm8k",
    "skills://mmlu-pro": "mmlu_pro", "skills://gsm8k": "gsm8k", "skills://math-500": "math500",
    "skills://gpqa": "gpqa", "skills://simpleqa": "simpleqa",
}
_SERVICE_UNBUILT = {
    "served_model_name": "serving a model under another name",
    "pipeline_parallel_size": "pipeline parallelism", "data_parallel_size": "data parallelism",
    "num_nodes": "multi-node model servers", "gpus": "GPU pinning of a service",
    "image": "running a service in a container image", "health_path": "custom health checks",
    "setup_commands": "service setup commands", "container_mounts": "container mounts",
    "pre_cmd": "a service pre-command", "ray_binary": "Ray-launched servers",
    "reasoning_pattern": "reasoning-trace extraction patterns",
    "max_input_tokens": "input token limits", "max_output_tokens": "output token limits",
    "benchmark": "gym servers nel starts", "server_cmd": "gym servers nel starts",
    "nat_config_file": "NAT agent services", "class_path": "plugin services",
    "config": "plugin services",
}
_BENCH_UNBUILT = {
    "context_window": "context-window limits", "skip_failed": "skip_failed",
    "max_system_retries": "max_system_retries (nel retries per request: services.<n>.max_retries)",
    "instruction_template": "instruction templates", "verifier": "separate verifier services",
}
_JUDGE_UNBUILT = ("rubric", "rubric_file", "system_prompt", "max_score", "swap_check",
                  "reference_free", "temperature", "timeout", "max_retries")
_SERVICE_DEFAULTS = field_defaults(ServiceConfig)
_BENCH_DEFAULTS = field_defaults(BenchmarkConfig)


class _Refusal(Exception):
    def __init__(self, path: tuple[Any, ...], feature: str, instead: str) -> None:
        super().__init__(feature)
        self.path, self.feature, self.instead = path, feature, instead


class _Unavailable(_Refusal):
    """A feature that exists but cannot run on this machine: `<what>; <fix>`, without
    "not supported yet"."""


def _changed(model: BaseModel, name: str, defaults: dict[str, Any]) -> bool:
    value = getattr(model, name)
    return name in defaults and value != defaults[name] and value not in (None, [], {})


def check_supported(cfg: NelConfig) -> None:
    """Refuse the first key whose feature nel does not have yet.

    Raises:
        ConfigError: `file:line: key <path>: <feature> is not supported yet in nel; <fix>`.
    """
    try:
        _check_cluster(cfg)
        _check_services(cfg)
        _check_benchmarks(cfg)
        _check_output(cfg)
    except _Refusal as r:
        key = ".".join(str(p) for p in r.path)
        line = cfg.line_of(*r.path)
        if isinstance(r, _Unavailable):
            raise ConfigError(f"{cfg._where}:{line or '?'}: key {key}: {r.feature}; "
                              f"{r.instead}") from None
        raise ConfigError(f"{cfg._where}:{line or '?'}: key {key}: {r.feature} is not "
                          f"supported yet in nel; {r.instead}") from None


def _check_cluster(cfg: NelConfig) -> None:
    """The cluster type's own refusal (its Launcher, nel_resources.launchers.registry): the
    config side holds no list of types or of their checks."""
    from nel_resources.launchers.registry import get_launcher

    bad = get_launcher(cfg.cluster.type).refusal(cfg)
    if bad is None:
        return
    line = cfg.line_of(*bad.path)
    where = f"{cfg._where}:{line or '?'}"
    if bad.bare:
        raise ConfigError(f"{where}: {bad.message}")
    raise ConfigError(f"{where}: key {'.'.join(str(p) for p in bad.path)}: {bad.message}")


def _check_interceptors(svc: ServiceConfig, at: tuple[Any, ...]) -> None:
    """NeMo Evaluator interceptors nel does not have load with the config and are refused
    here, on their `name`."""
    from nel_resources.proxy.registry import UNBUILT

    chains = [(("interceptors",), svc.interceptors)]
    if svc.proxy is not None:
        chains.append((("proxy", "interceptors"), svc.proxy.interceptors))
    for where, chain in chains:
        for i, ic in enumerate(chain):
            if ic.name in UNBUILT:
                raise _Refusal((*at, *where, i, "name"), f"the {ic.name!r} interceptor "
                               f"({UNBUILT[ic.name]})", "remove this interceptor")


def _check_services(cfg: NelConfig) -> None:
    for name, svc in cfg.services.items():
        at = ("services", name)
        if svc.type in ("nim", "docker_model", "dynamo", "nat", "custom"):
            raise _Refusal((*at, "type"), f"service type {svc.type!r}",
                           "start the server yourself and use `type: api` with its `url`, or "
                           "a type nel starts (llama_cpp, vllm, sglang, trt_llm)")
        if svc.type == "gym" and not svc.url:
            raise _Refusal(at, "a gym service nel starts itself (no `url`)",
                           "start the gym server yourself and give its `url`")
        if svc.node_pool is not None and cfg.cluster.type != "slurm":
            raise _Refusal((*at, "node_pool"), "node pools (placing services on SLURM nodes)",
                           "remove `node_pool`")
        for key, what in _SERVICE_UNBUILT.items():
            if _changed(svc, key, _SERVICE_DEFAULTS):
                raise _Refusal((*at, key), what, f"remove `{key}`")
        _check_interceptors(svc, at)
        started = [d for d in [name, *svc.depends_on] if cfg.services[d].type in LAUNCHED_TYPES]
        if svc.depends_on and started:
            raise _Refusal((*at, "depends_on"), "start order between launched services",
                           "remove `depends_on` (nel starts each launched service on its own)")
    for name, sb in cfg.sandboxes.items():
        if sb.node_pool is not None:
            raise _Refusal(("sandboxes", name, "node_pool"), "node pools",
                           "remove `node_pool`")
        if any(b.sandbox == sb for b in cfg.benchmarks):  # an unused block runs nothing
            _check_sandbox_runs_here(cfg, sb, ("sandboxes", name))


def _check_benchmarks(cfg: NelConfig) -> None:
    for i, b in enumerate(cfg.benchmarks):
        at: tuple[Any, ...] = ("benchmarks", i)
        if is_uri(b.name, "container") or b.solver.type == "container":
            _check_container(cfg, b, at)
        else:
            _check_name(b.name, (*at, "name"))
        if b.solver.type in ("harbor", "openclaw"):
            _check_external_agent(b, at)
        if b.solver.type not in ("simple", "tool_calling", "gym_delegation", "container",
                                 "openclaw", "harbor"):
            raise _Refusal((*at, "solver", "type"), f"the {b.solver.type!r} solver",
                           "use `type: simple` (one model call per problem), `tool_calling` "
                           "or `gym_delegation`")
        if b.solver.type == "tool_calling":
            _check_tool_calling(cfg, b, at)
        if b.solver.generation is not None:
            raise _Refusal((*at, "solver", "generation"), "per-benchmark generation settings",
                           "set them on the service (`services.<name>.generation`)")
        if b.solver.image_detail != "auto":
            raise _Refusal((*at, "solver", "image_detail"), "image inputs (VLM benchmarks)",
                           "remove `image_detail`")
        if b.sandbox is not None and b.sandbox not in cfg.sandboxes.values():  # inline block
            _check_sandbox_runs_here(cfg, b.sandbox, (*at, "sandbox"))
        for key, what in _BENCH_UNBUILT.items():
            if _changed(b, key, _BENCH_DEFAULTS):
                raise _Refusal((*at, key), what, f"remove `{key}`")
        for j, m in enumerate(b.scoring.metrics if b.scoring else []):
            _check_metric(m, (*at, "scoring", "metrics", j))


def _check_tool_calling(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """`sandbox_tools` needs a sandbox on the benchmark (`resource_service` is checked to be a
    `type: gym` service with a url when the config loads)."""
    if b.solver.sandbox_tools and (b.sandbox is None or b.sandbox.type == "none"):
        path = (*at, "solver", "sandbox_tools")
        raise ConfigError(f"{cfg._where}:{cfg.line_of(*path) or '?'}: key "
                          f"{'.'.join(map(str, path))}: sandbox tools need a sandbox: add "
                          "`sandbox: {type: local}` (or `{type: docker, image: ...}`) to the "
                          "benchmark")


# Sandbox types that run where their tool does; refused (with the reason) where it does not.
_HPC_SANDBOXES = ("slurm", "apptainer", "ecs_fargate", "custom")


def _check_sandbox_runs_here(cfg: NelConfig, sb: SandboxConfig, at: tuple[Any, ...]) -> None:
    """One line, before any request, when a sandbox's tool is missing here (the message says
    why: no SLURM client, no apptainer binary, no AWS credentials, a bad class_path)."""
    from nel_resources.sandboxes.base import SandboxError

    if sb.type in ("slurm", "apptainer", "ecs_fargate") and sb.image_template:
        raise _Refusal((*at, "image_template"), f"an image per problem (`image_template`) in "
                       f"{sb.type} sandboxes", "give one `image`")
    if sb.type == "slurm":
        from nel_resources.sandboxes.slurm import unavailable_reason
        why, key = unavailable_reason(sb.image), "type"
    elif sb.type == "apptainer":
        from nel_resources.sandboxes.apptainer import unavailable_reason
        why, key = unavailable_reason(), "type"
    elif sb.type == "ecs_fargate":
        from nel_resources.sandboxes.ecs_fargate import refusal
        r = refusal(sb)
        if r is not None and r.unbuilt:
            raise _Refusal((*at, r.key), r.why, r.instead)
        why, key = (r.why, r.key) if r else (None, "type")
    elif sb.type == "custom":
        from nel_resources.sandboxes.custom import check_class
        try:
            check_class(str(sb.class_path))
            why, key = None, "class_path"
        except SandboxError as e:
            why, key = str(e), "class_path"
    else:
        return
    if why:
        path = (*at, key)
        line = cfg.line_of(*path)
        raise ConfigError(f"{cfg._where}:{line or '?'}: key {'.'.join(map(str, path))}: "
                          f"{sb.type} sandbox cannot run here: {why}")


def _check_container(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """A `container://image#task` harness runs when its image is in the local Docker engine;
    what the harness decides itself (problems, repeats, shards) is refused on nel's side."""
    if not is_uri(b.name, "container"):
        raise _Refusal((*at, "name"), "`solver.type: container` without a harness image",
                       "name the benchmark `container://<image>#<task>`")
    from nel_resources.harness_image import missing_image_reason, parse_name

    try:
        image, _ = parse_name(b.name)
    except Exception as exc:
        raise _Refusal((*at, "name"), str(exc), "fix the name") from None
    for key, fix in (("max_problems", "set `params.limit_samples` for the harness"),
                     ("repeats", "set the harness's own repeats in `params`"),
                     ("problem_range", "set the harness's own selection in `params`")):
        if _changed(b, key, _BENCH_DEFAULTS):
            raise _Refusal((*at, key), f"`{key}` on a container:// benchmark (the harness picks "
                           "its problems)", fix)
    if n_shards_of(cfg, b) > 1:
        raise _Refusal((*at, "name"), "sharding a container:// benchmark (the harness is one run)",
                       "remove the shard count (`shards` / `cluster.shards`) for this benchmark")
    why = missing_image_reason(image)
    if why:
        path = (*at, "name")
        raise ConfigError(f"{cfg._where}:{cfg.line_of(*path) or '?'}: key "
                          f"{'.'.join(map(str, path))}: {why}")


def n_shards_of(cfg: NelConfig, b: BenchmarkConfig) -> int:
    from nel_resources.specs import n_shards

    return n_shards(cfg, b)


def _check_external_agent(b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """`harbor` and `openclaw` run an agent program nel does not ship: say what is missing."""
    import shutil

    if b.solver.type == "harbor":
        _check_harbor(b, at)
        return
    binary = b.solver.openclaw_bin
    if shutil.which(binary) is None:
        raise _Unavailable((*at, "solver", "openclaw_bin"), f"the 'openclaw' solver cannot run "
                           f"here: the OpenClaw CLI `{binary}` is not on PATH", "install it with "
                       "`make peers` (deploy/agents/install_openclaw.sh) and put "
                       "`.venv-peers/openclaw/bin` on PATH or give its path in `openclaw_bin`, "
                       "or use `solver.type: tool_calling`")
    _check_openclaw(b, at)


def _check_harbor(b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """A Harbor agent runs in Harbor's own venv (Python >= 3.12), in the sample's sandbox."""
    from nel_resources.harbor_install import harbor_python

    if harbor_python(b.solver.harbor_bin) is None:
        raise _Unavailable((*at, "solver", "harbor_bin"), f"the 'harbor' solver cannot run "
                           f"here: Harbor's CLI `{b.solver.harbor_bin}` is not on PATH",
                           "install it with `make peers` (Harbor 0.24.0 in a Python 3.12 venv) "
                           "and put `.venv-peers/harbor/bin` on PATH or give its path in "
                           "`harbor_bin`")
    if b.sandbox is None or b.sandbox.type == "none":
        raise _Unavailable((*at, "sandbox"), "the 'harbor' solver runs its agent in the "
                           "sample's sandbox and this benchmark has none",
                           "add `sandbox: {type: docker}` (the task's image) or `{type: local}`")
    if b.solver.skill_dir and not Path(b.solver.skill_dir).expanduser().is_dir():
        raise _Unavailable((*at, "solver", "skill_dir"), f"skill_dir {b.solver.skill_dir!r} "
                           "is not a directory", "give the skill's local directory")


# `openclaw` keys nel does not honour, with why (the others are: openclaw_bin, thinking,
# max_concurrent, context_window, idle_timeout_seconds).
_OPENCLAW_UNBUILT = {
    "web_search_provider": ("OpenClaw's web search (it calls a search service on the "
                            "internet)", "remove `web_search_provider`"),
    "config_path": ("a custom `openclaw.json` (nel writes each sample's config, pointing "
                    "OpenClaw at its capture proxy)", "remove `config_path`"),
    "skip_preflight": ("skipping the OpenClaw preflight (nel checks the CLI before any "
                       "request)", "remove `skip_preflight`"),
}


def _check_openclaw(b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """The OpenClaw CLI runs on this machine, outside any sandbox, with the keys above."""
    for key, (what, fix) in _OPENCLAW_UNBUILT.items():
        if key in b.solver.model_fields_set and getattr(b.solver, key) not in (None, False):
            raise _Refusal((*at, "solver", key), what, fix)
    if b.sandbox is not None and b.sandbox.type != "none":
        raise _Refusal((*at, "sandbox"), "the 'openclaw' solver in a sandbox (nel runs the "
                       "OpenClaw CLI on this machine, in a fresh home per sample; no image "
                       "with Node 24 and OpenClaw is built here)", "remove `sandbox` from "
                       "this benchmark")


def _check_harbor_name(name: str, at: tuple[Any, ...]) -> None:
    """`harbor://name@version` runs from its local task cache; without one it is refused
    (the Harbor registry cannot be reached from here)."""
    from benchmarks.agentic import harbor_cache_dir

    d = harbor_cache_dir(name.removeprefix("harbor://"))
    if not d.is_dir():
        raise _Unavailable(at, f"benchmark {name!r} cannot be had here: there is no local "
                           f"Harbor task cache at {d} and nel does not reach the Harbor registry "
                           "(it downloads nothing)",
                       "copy the dataset's task directories there (or set HARBOR_DATASETS_DIR "
                       "to the folder holding it)")


def _check_name(name: str, at: tuple[Any, ...]) -> None:
    scheme = name.split("://", 1)[0] if "://" in name else None
    if scheme is None or scheme == "gym":
        return
    if scheme == "harbor":
        _check_harbor_name(name, at)
        return
    same = _NEL_EQUIVALENT.get(name)
    instead = (f"nel has the same benchmark built in: write `name: {same}`" if same else
               "see `nel list` for the benchmarks nel has, or write your own (BYOB)")
    what = _HARNESS_SCHEMES.get(scheme, f"{scheme}:// benchmarks")
    raise _Refusal(at, f"benchmark {name!r} ({what})", instead)


def _check_metric(m: ScoringMetric, at: tuple[Any, ...]) -> None:
    if m.type not in ("scorer", "judge"):
        raise _Refusal((*at, "type"), f"{m.type!r} metrics", "use `type: scorer` or `type: judge`")
    if m.type == "judge":
        for key in _JUDGE_UNBUILT:
            if getattr(m, key) is not None:
                raise _Refusal((*at, key), f"the judge option `{key}`",
                               f"remove `{key}` (nel's judge uses its built-in rubric)")


def _check_output(cfg: NelConfig) -> None:
    out = cfg.output
    for i, name in [(i, n) for i, n in enumerate(out.exporter_names()) if not is_built(n)]:
        raise _Refusal(("output", "export", i), f"the {name!r} exporter",
                       "remove it from `output.export`; results are in the output directory's "
                       "Parquet files and exports/")
    if out.export_config:
        raise _Refusal(("output", "export_config"), "exporter settings",
                       "remove `export_config`")
    if out.timestamped:
        raise _Refusal(("output", "timestamped"), "timestamped output directories",
                       "remove `timestamped` (nel keeps one directory so reruns only evaluate "
                       "stale shards) or give `output.dir` a new name per run")
    if out.progress_interval is not None:
        raise _Refusal(("output", "progress_interval"), "periodic progress lines",
                       "remove `progress_interval` (nel shows a live progress bar)")

