"""`benchmarks:` entries with their `solver`, `sandbox` and `scoring` blocks.

NeMo Evaluator writes the model a benchmark runs against as `solver.service`; nel's older
spelling is the benchmark's own `service:`. Both land in `BenchmarkConfig.service` (the
field the engine reads); so do `solver.system_prompt` and `fewshot` (as `system_prompt`
and `num_fewshot`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from nel_resources.config._base import (
    ConfigError,
    _Strict,
    check_type_keys,
    field_defaults,
    key_error,
)
from nel_resources.config.headline import with_headline
from nel_resources.config.nemo_judges import with_nemo_judges
from nel_resources.config.services import GenerationParams, ServiceConfig

#: NeMo Evaluator 0.3.0's solver types; any other `type:` names a nel solver of
#: nel_assets.engine.solvers.factory.SOLVERS (checked in dagster_project.run_validation), whose
#: settings go under `config:`, so a new solver needs no edit here.
NEMO_SOLVER_TYPES = ("simple", "harbor", "agent", "tool_calling", "gym_delegation", "nat",
                     "openclaw", "container", "oracle", "custom")
_HARBOR = frozenset({"agent", "agent_kwargs", "container_env", "run_timeout", "cmd_timeout",
                     "timeout_strategy", "max_agent_timeout", "skill", "skill_dir",
                     "harbor_bin"})
_SOLVER_KEYS: dict[str, frozenset[str]] = {
    "simple": frozenset({"generation", "image_detail"}),
    "harbor": _HARBOR,
    "agent": frozenset({"framework", "agent", "agent_kwargs"}),
    "tool_calling": frozenset({"resource_service", "sandbox_tools", "max_turns", "generation",
                               "tool_timeout", "max_output_chars", "response_mode", "image_detail"}),
    "gym_delegation": frozenset({"gym_service", "gym_agent", "trust_reward"}),
    "nat": frozenset(),
    "openclaw": frozenset({"thinking", "context_window", "max_concurrent",
                           "idle_timeout_seconds", "web_search_provider", "config_path",
                           "skip_preflight", "openclaw_bin"}),
    "container": frozenset({"endpoint_type", "adapter_config", "env_vars", "mounts"}),
    "oracle": frozenset({"run_timeout", "timeout_strategy", "max_agent_timeout"}),
    "custom": frozenset({"class_path", "config"}),
}
#: the keys of a nel solver's block (not one of NeMo Evaluator's types)
_OWN_SOLVER_KEYS = frozenset({"config"})


class _SolverKeys(dict[str, frozenset[str]]):
    """`_SOLVER_KEYS`, where a type it does not name takes `_OWN_SOLVER_KEYS`."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)

    def __missing__(self, key: str) -> frozenset[str]:
        return _OWN_SOLVER_KEYS


DEFAULT_SHUFFLE_SEED = 42  # NeMo Evaluator 0.3.0's default `shuffle_seed`


def default_shuffle_seed() -> int | None:
    """`shuffle_seed` of a benchmark that does not set one: NEL_SHUFFLE_SEED (an integer, or
    `null`/`none` for the dataset order), else NeMo Evaluator's 42."""
    raw = os.environ.get("NEL_SHUFFLE_SEED", "").strip()
    if not raw:
        return DEFAULT_SHUFFLE_SEED
    if raw.lower() in ("null", "none", "~"):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"NEL_SHUFFLE_SEED={raw!r}: give an integer seed, or `null` to keep "
                          "the dataset order (the first N problems)") from None


class SolverConfig(_Strict):
    """`solver:` of a benchmark: how a problem is put to the model (`type: simple` = one call).

    `service` and `system_prompt` are read into the benchmark (see `BenchmarkConfig`).
    """

    type: str = "simple"
    generation: GenerationParams | None = None
    # `detail` of the image parts a benchmark's images are sent as (OpenAI's vision setting)
    image_detail: Literal["auto", "low", "high"] = "auto"
    agent: str | None = None
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    container_env: dict[str, str] = Field(default_factory=dict)
    run_timeout: float | None = Field(None, gt=0)
    cmd_timeout: float | None = Field(None, gt=0)
    timeout_strategy: Literal["override", "task", "max"] = "override"
    max_agent_timeout: float | None = Field(None, gt=0)
    skill: str | None = None
    skill_dir: str | None = None
    framework: str = "harbor"
    harbor_bin: str = "harbor"  # nel's: Harbor's CLI, whose venv runs the agent (Python >= 3.12)
    resource_service: str | None = None
    sandbox_tools: bool = False
    max_turns: int = Field(50, ge=1)
    tool_timeout: float = Field(180.0, gt=0)
    max_output_chars: int = Field(16384, ge=1)
    response_mode: Literal["last_message", "sandbox_artifact"] = "last_message"
    gym_service: str | None = None
    gym_agent: str | None = None
    trust_reward: bool = False
    thinking: str = "high"
    context_window: int | None = Field(None, ge=1)
    max_concurrent: int = Field(4, ge=1)
    idle_timeout_seconds: int = Field(600, ge=1)
    web_search_provider: Literal["tavily"] | None = None
    config_path: str | None = None
    skip_preflight: bool = False
    openclaw_bin: str = "openclaw"
    endpoint_type: str | None = None
    adapter_config: dict[str, Any] | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)
    mounts: dict[str, str] = Field(default_factory=dict)
    class_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _keys_for_type(cls, data: Any) -> Any:
        check_type_keys(data, "a solver", _SolverKeys(_SOLVER_KEYS), "simple", field_defaults(cls))
        return data

    @model_validator(mode="after")
    def _required(self) -> SolverConfig:
        if self.type in ("harbor", "agent") and not self.agent:
            raise key_error("agent", f"a `{self.type}` solver needs `agent` (e.g. openhands)")
        if self.type == "gym_delegation" and not self.gym_service:
            raise key_error("gym_service", "a `gym_delegation` solver needs `gym_service` "
                            "(the name of a `type: gym` service)")
        if self.type == "tool_calling" and not (self.resource_service or self.sandbox_tools):
            raise key_error("resource_service", "a `tool_calling` solver needs a tool source: "
                            "`resource_service: <gym service>` and/or `sandbox_tools: true`")
        if self.type == "custom" and not self.class_path:
            raise key_error("class_path", "a `custom` solver needs `class_path`")
        return self


SandboxType = Literal["docker", "ecs_fargate", "slurm", "apptainer", "local", "none", "custom"]
_SANDBOX_COMMON = frozenset({"capture_cmd", "verify_timeout", "stateful"})
_CONTAINER = _SANDBOX_COMMON | {"image", "image_template", "timeout", "concurrency",
                                "container_env"}
_SLURM_SB = _CONTAINER | {"memory", "cpus", "node_pool", "slots_per_node"}
_SANDBOX_KEYS: dict[str, frozenset[str]] = {
    "docker": _CONTAINER | {"memory", "cpus", "network"},
    "ecs_fargate": _CONTAINER | {
        "container_port", "region", "cluster", "subnets", "security_groups",
        "assign_public_ip", "cpu", "memory", "ephemeral_storage_gib", "execution_role_arn",
        "task_role_arn", "log_group", "log_stream_prefix", "max_task_lifetime_sec",
        "ssh_sidecar", "s3_bucket", "s3_prefix", "ecr_repository", "codebuild_project",
        "codebuild_service_role", "codebuild_build_timeout", "codebuild_compute_type",
        "dockerhub_secret_arn", "efs_filesystem_id", "efs_access_point_id", "ssm_project"},
    "slurm": _SLURM_SB,
    "apptainer": _SLURM_SB | {"sif_cache_dir"},
    "local": _CONTAINER | {"memory", "ephemeral_storage_gib"},
    "none": _SANDBOX_COMMON,
    "custom": frozenset({"class_path", "config"}),
}
#: the keys of a nel solver's block (not one of NeMo Evaluator's types)
_OWN_SOLVER_KEYS = frozenset({"config"})


class _SolverKeys(dict[str, frozenset[str]]):
    """`_SOLVER_KEYS`, where a type it does not name takes `_OWN_SOLVER_KEYS`."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)

    def __missing__(self, key: str) -> frozenset[str]:
        return _OWN_SOLVER_KEYS


class SandboxConfig(_Strict):
    """A sandbox (an isolated place to run model-written code or agents).

    Written inline on a benchmark or by name from the top-level `sandboxes:`.
    """

    type: SandboxType
    capture_cmd: str | None = None
    verify_timeout: float = Field(600.0, gt=0)
    stateful: bool = False
    image: str | None = None
    image_template: str | None = None
    memory: str | int | None = None
    cpus: float | None = Field(None, gt=0)
    cpu: str | int | None = None
    timeout: float = Field(1800.0, gt=0)
    concurrency: int = Field(4, ge=1)
    #: No network unless the config names one (NeMo Evaluator's default is `bridge`). The
    #: default itself is `none`, so a config dumped and validated again (which marks every
    #: field as set) can never turn into a networked sandbox.
    network: Literal["bridge", "host", "none"] = "none"
    container_env: dict[str, str] = Field(default_factory=dict)
    container_port: int | None = None
    region: str | None = None
    cluster: str | None = None
    subnets: list[str] = Field(default_factory=list)
    security_groups: list[str] = Field(default_factory=list)
    assign_public_ip: bool | None = None
    ephemeral_storage_gib: int | None = Field(None, ge=1)
    execution_role_arn: str | None = None
    task_role_arn: str | None = None
    log_group: str | None = None
    log_stream_prefix: str | None = None
    max_task_lifetime_sec: int | None = Field(None, ge=1)
    ssh_sidecar: dict[str, Any] | None = None
    s3_bucket: str | None = None
    s3_prefix: str | None = None
    ecr_repository: str | None = None
    codebuild_project: str | None = None
    codebuild_service_role: str | None = None
    codebuild_build_timeout: int | None = None
    codebuild_compute_type: str | None = None
    dockerhub_secret_arn: str | None = None
    efs_filesystem_id: str | None = None
    efs_access_point_id: str | None = None
    ssm_project: str = "harbor"
    node_pool: str | None = None
    slots_per_node: int = Field(4, ge=1)
    sif_cache_dir: str | None = None
    class_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _keys_for_type(cls, data: Any) -> Any:
        if isinstance(data, dict) and "type" not in data:
            raise key_error("type", "a sandbox needs `type:` (" + ", ".join(_SANDBOX_KEYS) + ")")
        check_type_keys(data, "a sandbox", _SANDBOX_KEYS, None, field_defaults(cls))
        return data

    @model_validator(mode="after")
    def _required(self) -> SandboxConfig:
        if self.type == "apptainer" and self.node_pool and not self.sif_cache_dir:
            raise key_error("sif_cache_dir", "an apptainer sandbox on a `node_pool` needs "
                            "`sif_cache_dir` (where the remote nodes find the images)")
        if self.type == "custom" and not self.class_path:
            raise key_error("class_path", "a `custom` sandbox needs `class_path`")
        return self


MetricType = Literal["scorer", "judge", "pairwise_judge", "ensemble_judge", "sandbox",
                     "reward_model", "custom"]
_JUDGE_OPTS = frozenset({"rubric", "rubric_file", "max_score", "temperature", "timeout",
                         "max_retries"})
_METRIC_KEYS: dict[str, frozenset[str]] = {
    "scorer": frozenset({"name", "params"}),
    "judge": _JUDGE_OPTS | {"name", "service", "allow_self_judge", "params", "system_prompt",
                            "swap_check", "reference_free"},
    "pairwise_judge": _JUDGE_OPTS | {"name", "judge_service", "baseline_service",
                                     "swap_check"},
    "ensemble_judge": _JUDGE_OPTS | {"name", "services", "aggregation"},
    "sandbox": frozenset({"name", "command", "verify_timeout"}),
    "reward_model": frozenset({"name", "service", "mode", "aspect", "score_range",
                               "threshold", "timeout", "max_retries"}),
    "custom": frozenset({"name", "class_path", "config"}),
}


class ScoringMetric(_Strict):
    """One metric in a benchmark's `scoring.metrics` list (a scorer, or an LLM judge)."""

    type: MetricType = "scorer"
    name: str
    service: str | None = None
    allow_self_judge: bool = False
    params: dict[str, Any] = Field(default_factory=dict)
    # NeMo Evaluator's judge options; None = not written (nel's judge defaults apply).
    rubric: str | None = None
    rubric_file: str | None = None
    system_prompt: str | None = None
    max_score: float | None = Field(None, gt=0)
    swap_check: bool | None = None
    reference_free: bool | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    timeout: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0)
    judge_service: str | None = None
    baseline_service: str | None = None
    services: list[str] = Field(default_factory=list)
    aggregation: Literal["mean", "median", "majority_vote"] = "mean"
    command: str | None = None
    verify_timeout: float = Field(600.0, gt=0)
    mode: Literal["single", "multi_aspect", "pairwise"] = "single"
    aspect: str | None = None
    score_range: tuple[float, float] = (0.0, 1.0)
    threshold: float = 0.5
    class_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _keys_for_type(cls, data: Any) -> Any:
        check_type_keys(data, "a metric", _METRIC_KEYS, "scorer", field_defaults(cls))
        return data

    @model_validator(mode="after")
    def _check(self) -> ScoringMetric:
        if self.rubric and self.rubric_file:
            raise key_error("rubric_file", "give `rubric` (inline) or `rubric_file`, not both")
        if self.type == "ensemble_judge" and len(self.services) < 2:
            raise key_error("services", "an ensemble judge needs at least two `services`")
        if self.type == "pairwise_judge" and not (self.judge_service and self.baseline_service):
            raise key_error("judge_service", "a pairwise judge needs `judge_service` and "
                            "`baseline_service`")
        if self.type == "reward_model" and not self.service:
            raise key_error("service", "a reward-model metric needs `service`")
        if self.score_range[0] >= self.score_range[1]:
            raise key_error("score_range", "score_range must be [low, high] with low < high")
        return self


class ScoringConfig(_Strict):
    """`scoring:` of a benchmark: extra scorers and LLM judges.

    `primary` names the metric that is the headline score. Left out, it follows how the
    benchmark entry is written: with scorer metrics only, an entry in nel's spelling (its own
    `service:`) has its first scorer as the headline, one in NeMo Evaluator's spelling
    (`solver.service`) the default scorer, as in NeMo Evaluator 0.3.0; with a judge, or
    `include_defaults: false`, a judge-graded benchmark's judge, else the default scorer (see
    nel_resources.config.headline and "Differences from NeMo Evaluator").
    """

    include_defaults: bool = True
    metrics: list[ScoringMetric] = Field(default_factory=list)
    primary: str | None = None

    @model_validator(mode="after")
    def _unique(self) -> ScoringConfig:
        names = [m.name for m in self.metrics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise key_error("metrics", f"metric names must be unique; repeated: {dupes}")
        return self


class BenchmarkConfig(_Strict):
    """One benchmark to evaluate, against one or more services."""

    name: str
    service: str | list[str] | None = None
    solver: SolverConfig = Field(default_factory=SolverConfig)
    repeats: int = Field(1, ge=1, le=10_000)
    max_problems: int | None = Field(None, ge=1)
    problem_range: tuple[int, int] | None = None
    shards: int = Field(1, ge=1, le=10_000)
    system_prompt: str | None = None
    num_fewshot: int | None = Field(None, ge=0)
    # Whose prompts a built-in sends: `nemo` (NeMo Evaluator 0.3.0's request: its prompt,
    # no system prompt, no few-shot) or `nel` (nel's own); `benchmarks.prompt_sets`.
    prompt_set: Literal["nemo", "nel"] = "nemo"
    params: dict[str, Any] = Field(default_factory=dict)
    scoring: ScoringConfig | None = None
    sandbox: SandboxConfig | None = None
    module: str | None = None  # a BYOB Python file or module that registers `name`
    timeout: float | None = Field(None, gt=0)  # seconds per model request; overrides the service's
    max_concurrent: int | None = Field(None, ge=1)  # requests in flight for this benchmark
    # Seed of NeMo Evaluator's shuffle of the problems before `max_problems`/shards take
    # their share; null keeps dataset order (the first N). Default 42 as there, or
    # NEL_SHUFFLE_SEED.
    shuffle_seed: int | None = Field(default_factory=lambda: default_shuffle_seed())
    context_window: int | None = Field(None, ge=1)
    skip_failed: bool = False
    max_system_retries: int = Field(3, ge=0)
    instruction_template: str | None = None
    verifier: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "fewshot" in data:
            few = data.pop("fewshot")
            if data.get("num_fewshot") not in (None, few):
                raise key_error("fewshot", "give `fewshot` or `num_fewshot`, not both")
            data["num_fewshot"] = few
        solver = data.get("solver")
        # The headline metric's rule depends on this entry's spelling, which the lines
        # below fold into one: decided now and written into `scoring.primary`.
        nemo_spelling = isinstance(solver, dict) and solver.get("service") is not None
        if data.get("scoring") is not None:
            data["scoring"] = with_headline(data["scoring"], nemo_spelling=nemo_spelling)
            if nemo_spelling:
                data["scoring"] = with_nemo_judges(data["scoring"])
        if isinstance(solver, dict):
            solver = dict(solver)
            for key in ("service", "system_prompt", "prompt_set"):
                if key not in solver:
                    continue
                value = solver.pop(key)
                if data.get(key) is not None and value is not None and data[key] != value:
                    raise key_error("solver", f"`{key}: {data[key]}` and `solver.{key}: {value}` "
                                    f"disagree; write it once, as `solver.{key}`")
                if value is not None:
                    data[key] = value
            data["solver"] = solver
        return data

    @field_validator("problem_range", mode="before")
    @classmethod
    def _range(cls, v: Any) -> Any:
        if isinstance(v, str) and ":" in v:
            a, b = v.split(":", 1)
            return (int(a), int(b))
        return v

    def service_names(self, all_services: dict[str, ServiceConfig]) -> list[str]:
        """The services this benchmark runs against (default: every `role: model`)."""
        if self.service is None:
            return [n for n, s in all_services.items() if s.role == "model" and s.type != "gym"]
        return [self.service] if isinstance(self.service, str) else list(self.service)
