"""The `nel` YAML config: schema, `${ENV}` expansion, `-O` overrides and precise errors.

The schema follows NeMo Evaluator's walkthrough configs (`services`, `sandboxes`,
`benchmarks`, `cluster`, `output`). Every error names the file, the line and the key.
No Dagster import here: the CLI validates configs without paying for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchmarks.errors import NelError

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
_GEN_KEYS = ("temperature", "top_p", "max_tokens", "seed", "stop", "frequency_penalty",
             "presence_penalty", "n_logprobs")


class ConfigError(NelError):
    """An invalid config: the message names file, line and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GenerationParams(_Strict):
    """Sampling parameters sent with every request (None = the server's default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def to_request(self) -> dict[str, Any]:
        """Non-null parameters in OpenAI request form."""
        out = {k: v for k, v in self.model_dump(exclude={"extra_body"}).items() if v is not None}
        out.update(self.extra_body)
        return out


ServiceType = Literal["api", "llama_cpp", "vllm", "sglang", "trt_llm", "gym"]
ApiProtocol = Literal["chat_completions", "completions", "responses"]


class ServiceConfig(_Strict):
    """A model endpoint nel calls (`type: api`) or starts itself (llama_cpp, vllm, ...)."""

    type: ServiceType = "api"
    url: str | None = None
    protocol: ApiProtocol = "chat_completions"
    model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    role: Literal["model", "judge"] = "model"
    generation: GenerationParams = Field(default_factory=GenerationParams)
    system_prompt: str | None = None
    timeout: float = Field(120.0, gt=0)
    connect_timeout: float = Field(10.0, gt=0)
    max_concurrent: int = Field(64, ge=1, le=4096)
    max_retries: int = Field(5, ge=0, le=50)
    retry_backoff: float = Field(0.5, ge=0)
    headers: dict[str, str] = Field(default_factory=dict)
    transport: Literal["auto", "raw", "aiohttp"] = "auto"
    # Launched services (issue: launched model services)
    model_path: str | None = None
    port: int | None = None
    host: str = "127.0.0.1"
    tensor_parallel_size: int = 1
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout: float = 600.0
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_generation(cls, data: Any) -> Any:
        # Accept generation keys at the service's top level too (`temperature: 0`).
        if isinstance(data, dict) and any(k in data for k in _GEN_KEYS):
            data = dict(data)
            gen = dict(data.get("generation") or {})
            for k in _GEN_KEYS:
                if k in data:
                    gen[k] = data.pop(k)
            data["generation"] = gen
        return data

    def resolved_api_key(self) -> str | None:
        """The API key, read from `api_key_env` when set (the variable must exist)."""
        if self.api_key_env:
            val = os.environ.get(self.api_key_env)
            if val is None:
                raise ConfigError(
                    f"environment variable {self.api_key_env} (api_key_env) is not set; "
                    f"export {self.api_key_env}=<your key>"
                )
            return val
        return self.api_key

    def resolved_headers(self) -> dict[str, str]:
        """The extra request headers, with `${VAR}` references expanded now."""
        return {
            k: expand_env(v, where=f"header {k}") if "${" in v else v
            for k, v in self.headers.items()
        }

    def settings_fingerprint(self) -> str:
        """Hash of what changes this service's answers (not its URL or key)."""
        payload = {
            "model": self.model,
            "protocol": self.protocol,
            "generation": self.generation.model_dump(),
            "system_prompt": self.system_prompt,
            "model_path": self.model_path,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


class ScoringMetric(_Strict):
    """One metric in a benchmark's `scoring.metrics` list."""

    type: Literal["scorer", "judge"] = "scorer"
    name: str
    service: str | None = None
    allow_self_judge: bool = False
    params: dict[str, Any] = Field(default_factory=dict)


class ScoringConfig(_Strict):
    """`scoring:` of a benchmark: extra scorers and LLM judges."""

    include_defaults: bool = True
    metrics: list[ScoringMetric] = Field(default_factory=list)
    primary: str | None = None


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


class BenchmarkConfig(_Strict):
    """One benchmark to evaluate, against one or more services."""

    name: str
    service: str | list[str] | None = None
    repeats: int = Field(1, ge=1, le=10_000)
    max_problems: int | None = Field(None, ge=1)
    problem_range: tuple[int, int] | None = None
    # NeMo Evaluator's seed for picking `max_problems` items (and their order); null keeps
    # the dataset order (the first N). Default 42 as there, or NEL_SHUFFLE_SEED.
    shuffle_seed: int | None = Field(default_factory=lambda: default_shuffle_seed())
    shards: int = Field(1, ge=1, le=10_000)
    system_prompt: str | None = None
    num_fewshot: int | None = Field(None, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    scoring: ScoringConfig | None = None
    sandbox: str | None = None
    module: str | None = None  # a BYOB Python file or module that registers `name`
    timeout: float | None = None  # seconds per model request; overrides the service's

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


class ClusterConfig(_Strict):
    """Where shards run: locally, or spread on SLURM / Kubernetes / Docker / Ray."""

    type: Literal["local", "slurm", "k8s", "kubernetes", "docker", "ray"] = "local"
    shards: int | None = Field(None, ge=1)
    slurm: dict[str, Any] = Field(default_factory=dict)
    k8s: dict[str, Any] = Field(default_factory=dict)
    docker: dict[str, Any] = Field(default_factory=dict)
    ray: dict[str, Any] = Field(default_factory=dict)


class OutputConfig(_Strict):
    """Where results go."""

    dir: str = Field("./nel-results", min_length=1)
    dagster_home: str | None = None
    exports: list[str] = Field(default_factory=list)


class ComparisonConfig(_Strict):
    """Baseline for the comparison asset and the gate policy."""

    baseline: str | None = None
    policy: str | None = None
    max_drop: float | None = None


class CheckpointsConfig(_Strict):
    """`checkpoints:` a directory whose new entries are model checkpoints to evaluate.

    Each new entry matching `pattern` (files such as `*.gguf`, or subdirectories when
    `directories` is true) becomes a `model` partition served by `service_template`, with
    `{checkpoint}` / `{checkpoint_name}` in its strings replaced by the entry's path / slug
    (and `model_path` defaulting to the path).
    """

    dir: str | None = None
    pattern: str = "*.gguf"
    directories: bool = False
    service_template: ServiceConfig = Field(default_factory=lambda: ServiceConfig(type="llama_cpp"))
    # A checkpoint younger than this (or whose size changed since the last look) is
    # treated as still being written and retried on a later tick.
    min_age_seconds: float = Field(10.0, ge=0)
    interval_seconds: int = Field(30, ge=1)


class NelConfig(_Strict):
    """A whole nel config."""

    services: dict[str, ServiceConfig] = Field(default_factory=dict)
    sandboxes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    benchmarks: list[BenchmarkConfig] = Field(default_factory=list)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    comparison: ComparisonConfig = Field(default_factory=ComparisonConfig)
    data_dir: str | None = None
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)

    @model_validator(mode="after")
    def _check_refs(self) -> NelConfig:
        for i, b in enumerate(self.benchmarks):
            for s in b.service_names(self.services):
                if s not in self.services:
                    known = ", ".join(sorted(self.services)) or "none defined"
                    raise ValueError(
                        f"benchmarks[{i}] ({b.name}) uses service {s!r}, which is not in "
                        f"`services` ({known})"
                    )
        return self

    def fingerprint_json(self) -> str:
        """Canonical JSON of the config (API keys and literal header values removed).

        It is written into exports and bundles: a header's value is kept only when it is a
        `${VAR}` reference (which holds no secret).
        """
        data = self.model_dump(mode="json")
        for s in data.get("services", {}).values():
            if s.get("api_key"):
                s["api_key"] = "***"
            headers = s.get("headers") or {}
            for k, v in headers.items():
                if "${" not in v:
                    headers[k] = "***"
        return json.dumps(data, sort_keys=True)


# --------------------------------------------------------------------------- loading


def expand_env(text: str, *, where: str = "config") -> str:
    """Replace `${VAR}` and `${VAR:-default}`; an unset variable without default is an error."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        val = os.environ.get(name)
        if val is None or (val == "" and default is not None and ":-" in m.group(0)):
            if default is not None:
                return default
            line = text.count("\n", 0, m.start()) + 1
            raise ConfigError(
                f"{where}:{line}: environment variable {name} is not set "
                f"(export it, or write ${{{name}:-default}})"
            )
        return val

    return _ENV_RE.sub(sub, text)


def _line_map(node: yaml.Node, path: tuple[Any, ...] = (), out: dict | None = None) -> dict:
    """Map each key path to the 1-based line where it appears in the YAML."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[(*path, key)] = k.start_mark.line + 1
            _line_map(v, (*path, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, (*path, i), out)
    return out


def parse_override(expr: str) -> tuple[list[str | int], Any]:
    """`a.b[0].c=v` or `a.b.0.c=v` -> (path, YAML-parsed value)."""
    if "=" not in expr:
        raise ConfigError(f"override {expr!r}: expected KEY=VALUE (e.g. -O benchmarks.0.repeats=3)")
    key, raw = expr.split("=", 1)
    parts: list[str | int] = []
    for tok in re.split(r"\.|\[|\]", key.strip()):
        if tok == "":
            continue
        parts.append(int(tok) if tok.isdigit() else tok)
    if not parts:
        raise ConfigError(f"override {expr!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_override(data: dict[str, Any], expr: str) -> None:
    """Set one `-O` override in the raw config dict (creating maps as needed)."""
    path, value = parse_override(expr)
    cur: Any = data
    for i, p in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(cur, list):
            if not isinstance(p, int) or p >= len(cur):
                raise ConfigError(f"override {expr!r}: index {p} out of range (list has {len(cur)})")
            cur = cur[p]
        else:
            if p not in cur or cur[p] is None:
                cur[p] = [] if isinstance(nxt, int) else {}
            cur = cur[p]
    last = path[-1]
    if isinstance(cur, list):
        if not isinstance(last, int) or last > len(cur):
            raise ConfigError(f"override {expr!r}: index {last} out of range (list has {len(cur)})")
        if last == len(cur):
            cur.append(value)
        else:
            cur[last] = value
    elif isinstance(cur, dict):
        cur[last] = value
    else:
        raise ConfigError(f"override {expr!r}: {'.'.join(map(str, path[:-1]))} is not a mapping")


def _format_validation(exc: ValidationError, where: str, lines: dict) -> str:
    msgs = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        # pydantic appends the tagged-union member / literal name; trim to keys in the YAML.
        line = None
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                line = lines[loc[:n]]
                break
        key = ".".join(str(p) for p in loc) or "(top level)"
        typ = err["type"]
        if typ == "extra_forbidden":
            text = f"unknown key {key!r}"
        elif typ == "missing":
            text = f"missing required key {key!r}"
        else:
            text = f"{key}: {err['msg']}"
            if "input" in err and typ != "value_error":
                text += f" (got {err['input']!r})"[:200]
        msgs.append(f"{where}:{line or '?'}: {text}")
    return "; ".join(msgs)


# A config is a page of YAML; anything far bigger is a wrong file (or an attack), and
# parsing it would take minutes.
MAX_CONFIG_BYTES = 1_000_000
# Values a config may expand to through YAML aliases (a "billion laughs" file expands a
# few lines into billions).
MAX_YAML_NODES = 100_000


_WHOLE_REF_RE = re.compile(r"^\$\{(\w+)\}$")


def _keep_secret_references(data: dict[str, Any], raw: Any) -> None:
    """Keep `${VAR}` references to secrets instead of their values.

    `api_key: ${VAR}` becomes `api_key_env: VAR`, and a header written with `${VAR}` keeps
    its template (expanded when requests are made, see `ServiceConfig.resolved_headers`):
    a config saved from this one (`<out>/nel-config.yaml`) then authenticates wherever
    it is run, and never holds the secret itself.
    """
    services = data.get("services")
    raw_services = raw.get("services") if isinstance(raw, dict) else None
    if not isinstance(services, dict) or not isinstance(raw_services, dict):
        return
    for name, svc in services.items():
        raw_svc = raw_services.get(name)
        if not isinstance(svc, dict) or not isinstance(raw_svc, dict):
            continue
        ref = raw_svc.get("api_key")
        m = _WHOLE_REF_RE.match(ref) if isinstance(ref, str) else None
        if m and not svc.get("api_key_env"):
            svc.pop("api_key", None)
            svc["api_key_env"] = m.group(1)
        headers, raw_headers = svc.get("headers"), raw_svc.get("headers")
        if isinstance(headers, dict) and isinstance(raw_headers, dict):
            for key, value in raw_headers.items():
                if isinstance(value, str) and "${" in value and key in headers:
                    headers[key] = value


def read_config_text(p: Path) -> str:
    """The text of a config file, refusing what cannot be one in one line each."""
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    if p.is_dir():
        raise ConfigError(f"config path {p} is a directory; give the YAML file inside it")
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{p}: {size:,} bytes is not a config (the limit is {MAX_CONFIG_BYTES:,}); "
                "check the path"
            )
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{p}: byte {exc.start} is not UTF-8 (a binary or UTF-16 file?); save the config "
            "as UTF-8 text"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{p}: contains NUL bytes (a binary file?); a config is YAML text")
    return text.removeprefix("\ufeff")


def check_yaml_size(root: yaml.Node, where: str) -> None:
    """Refuse recursive aliases and alias bombs before `safe_load` expands them.

    Counted on the composed node graph, where an alias is a shared node: linear time.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    # Iterative post-order walk: a deep document must not hit Python's recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children(node))
            if total > MAX_YAML_NODES:
                raise ConfigError(
                    f"{where}:{node.start_mark.line + 1}: YAML aliases expand this config to "
                    f"more than {MAX_YAML_NODES:,} values; write the values out instead"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in active:
            raise ConfigError(
                f"{where}:{node.start_mark.line + 1}: a YAML alias refers to a value that "
                "contains it (recursive alias); write the value out instead"
            )
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: list[str] | None = None,
    data: dict[str, Any] | None = None,
) -> NelConfig:
    """Read, expand, override and validate a config.

    Args:
        path: YAML file (or None with `data`).
        overrides: `-O key.path=value` expressions, applied after env expansion.
        data: a raw config dict to use instead of a file.

    Raises:
        ConfigError: with file:line and the key for every problem.
    """
    where = str(path) if path else "<config>"
    lines: dict = {}
    raw_text: str | None = None
    if path is not None:
        raw_text = read_config_text(Path(path))
        text = expand_env(raw_text, where=where)
        try:
            node = yaml.compose(text)
            if node is not None:
                check_yaml_size(node, where)
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else "?"
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{where}:{line}: invalid YAML: {problem}") from None
        if data is None:
            raise ConfigError(
                f"{where}: the config is empty; it needs `services` (the model endpoints) "
                "and `benchmarks` (what to run on them)"
            )
        if node is not None:
            lines = _line_map(node)
        if not isinstance(data, dict):
            raise ConfigError(f"{where}:1: the config must be a mapping with keys such as "
                              "services, benchmarks, output")
    data = dict(data or {})
    if raw_text is not None:
        _keep_secret_references(data, yaml.safe_load(raw_text))
    for expr in overrides or []:
        apply_override(data, expr)
    try:
        cfg = NelConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, where, lines)) from None
    if path is not None:
        _anchor_paths(cfg, Path(path).resolve().parent)
    return cfg


def _anchor_paths(cfg: NelConfig, base: Path) -> None:
    """Input files named relative to the config file are found there (so the config still
    works when loaded from another directory, e.g. by `dagster dev`); paths that only exist
    relative to the current directory are left alone."""

    def anchored(value: str | None) -> str | None:
        if not value or "://" in value or Path(value).expanduser().is_absolute():
            return value
        candidate = base / value
        return str(candidate) if candidate.exists() and not Path(value).exists() else value

    cfg.data_dir = anchored(cfg.data_dir)
    cfg.comparison.policy = anchored(cfg.comparison.policy)
    cfg.checkpoints.dir = anchored(cfg.checkpoints.dir)
    for b in cfg.benchmarks:
        if b.module and (b.module.endswith(".py") or "/" in b.module):
            b.module = anchored(b.module)
    for svc in cfg.services.values():
        svc.model_path = anchored(svc.model_path)
