"""The whole config (`NelConfig`) and its cross-references between blocks."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from nel_resources.config._base import _Strict, key_error
from nel_resources.config.benchmarks import BenchmarkConfig, SandboxConfig
from nel_resources.config.deployment import ClusterConfig, OutputConfig
from nel_resources.config.services import ServiceConfig
from nel_resources.wire.endpoint_url import redact_url

# NeMo Evaluator also reserves `default`; nel's flag-only runs name their service that.
_RESERVED_SERVICE_NAMES = ("none", "")


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
    # A regex with one group that captures the training step in a checkpoint's name (for
    # names the built-in markers miss); the rest of the name is the checkpoint's family.
    step_pattern: str | None = None

    @field_validator("step_pattern")
    @classmethod
    def _one_group(cls, v: str | None) -> str | None:
        from nel_resources.config.patterns import check_step_pattern

        if v is not None:
            check_step_pattern(v)
        return v


class NelConfig(_Strict):
    """A whole nel config (NeMo Evaluator 0.3.0's schema plus nel's own blocks)."""

    services: dict[str, ServiceConfig] = Field(default_factory=dict)
    sandboxes: dict[str, SandboxConfig] = Field(default_factory=dict)
    benchmarks: list[BenchmarkConfig] = Field(default_factory=list)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    comparison: ComparisonConfig = Field(default_factory=ComparisonConfig)
    data_dir: str | None = None
    # Fetch a missing benchmark file from the Hugging Face hub (None: `NEL_ALLOW_DOWNLOADS`).
    allow_downloads: bool | None = None
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    # Where this config was read from and the line of each key path: `check_supported`
    # names file:line for keys it refuses. Not part of the config's content.
    _where: str = PrivateAttr(default="<config>")
    _lines: dict[tuple[Any, ...], int] = PrivateAttr(default_factory=dict)
    # Per benchmark entry, its index in the file when per-model entries were merged.
    _benchmark_origin: list[int] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _resolve_sandbox_names(cls, data: Any) -> Any:
        # `sandbox: <name>` on a benchmark is the block of that name in `sandboxes:`.
        if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
            return data
        named = data.get("sandboxes") or {}
        benches = []
        for i, bench in enumerate(data["benchmarks"]):
            if isinstance(bench, dict) and isinstance(bench.get("sandbox"), str):
                name = bench["sandbox"]
                if not isinstance(named, dict) or name not in named:
                    known = ", ".join(sorted(named)) if isinstance(named, dict) and named else "none"
                    raise key_error(f"benchmarks.{i}.sandbox",
                                    f"sandbox {name!r} is not defined under `sandboxes:` "
                                    f"(defined: {known}); define it there or write the "
                                    "sandbox block inline")
                bench = {**bench, "sandbox": named[name]}
            benches.append(bench)
        return {**data, "benchmarks": benches}

    @model_validator(mode="after")
    def _check_refs(self) -> NelConfig:
        for name in self.services:
            if name in _RESERVED_SERVICE_NAMES:
                raise key_error(f"services.{name}", f"{name!r} is reserved and cannot name a "
                                "service; use a name such as `model` or `judge`")
        known = ", ".join(sorted(self.services)) or "none defined"

        def need(name: str | None, at: str, kind: str | None = None) -> None:
            if name is None:
                return
            if name not in self.services:
                raise key_error(at, f"service {name!r} is not in `services` ({known})")
            if kind == "gym" and self.services[name].type != "gym":
                raise key_error(at, f"service {name!r} must be a `type: gym` service "
                                f"(it is {self.services[name].type!r})")

        for i, b in enumerate(self.benchmarks):
            for s in b.service_names(self.services):
                if s not in self.services:
                    raise key_error(f"benchmarks.{i}.solver", f"benchmarks[{i}] ({b.name}) uses "
                                    f"service {s!r}, which is not in `services` ({known})")
            need(b.solver.resource_service, f"benchmarks.{i}.solver.resource_service", "gym")
            need(b.solver.gym_service, f"benchmarks.{i}.solver.gym_service", "gym")
            need(b.verifier, f"benchmarks.{i}.verifier")
            for j, m in enumerate(b.scoring.metrics if b.scoring else []):
                at = f"benchmarks.{i}.scoring.metrics.{j}"
                need(m.service, f"{at}.service")
                need(m.judge_service, f"{at}.judge_service")
                need(m.baseline_service, f"{at}.baseline_service")
                for k, s in enumerate(m.services):
                    need(s, f"{at}.services.{k}")
        self._check_depends_on()
        self._check_node_pools()
        return self

    @model_validator(mode="after")
    def _merge_per_model(self) -> NelConfig:
        # NeMo Evaluator's one entry per model becomes one entry listing the services.
        from nel_resources.config.per_model import merge_per_model_entries

        merged, origin = merge_per_model_entries(self.benchmarks, self.services)
        if len(merged) != len(self.benchmarks):
            self.benchmarks = merged
            self._benchmark_origin = origin
        return self

    def _check_depends_on(self) -> None:
        for name, svc in self.services.items():
            for dep in svc.depends_on:
                if dep == name or dep not in self.services:
                    why = "itself" if dep == name else f"{dep!r}, which is not in `services`"
                    raise key_error(f"services.{name}.depends_on", f"service {name!r} depends "
                                    f"on {why}")
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done

        def visit(n: str) -> None:
            state[n] = 1
            for dep in self.services[n].depends_on:
                if state.get(dep) == 1:
                    raise key_error(f"services.{n}.depends_on",
                                    f"services depend on each other in a cycle ({n} -> {dep})")
                if dep not in state:
                    visit(dep)
            state[n] = 2

        for n in self.services:
            if n not in state:
                visit(n)

    def _check_node_pools(self) -> None:
        pools = self.cluster.node_pools
        if not pools:
            return
        where = [(f"services.{n}.node_pool", s.node_pool) for n, s in self.services.items()]
        where += [(f"sandboxes.{n}.node_pool", s.node_pool) for n, s in self.sandboxes.items()]
        where += [(f"benchmarks.{i}.sandbox.node_pool", b.sandbox.node_pool)
                  for i, b in enumerate(self.benchmarks) if b.sandbox]
        for at, pool in where:
            if pool is not None and pool not in pools:
                raise key_error(at, f"node pool {pool!r} is not in cluster.node_pools "
                                f"({', '.join(sorted(pools))})")

    def fingerprint_json(self) -> str:
        """Canonical JSON of the config (API keys and literal header values removed).

        It is written into exports and bundles: a header's value is kept only when it is a
        `${VAR}` reference (which holds no secret).
        """
        data = self.model_dump(mode="json")
        for s in data.get("services", {}).values():
            if s.get("api_key"):
                s["api_key"] = "***"
            if s.get("url"):  # user-info and query values are credentials
                s["url"] = redact_url(s["url"])
            headers = s.get("headers") or {}
            for k, v in headers.items():
                if "${" not in v:
                    headers[k] = "***"
        return json.dumps(data, sort_keys=True)

    def line_of(self, *path: Any) -> int | None:
        """The line where a key path was written in the config file (or its nearest parent)."""
        for n in range(len(path), -1, -1):
            if path[:n] in self._lines:
                return self._lines[path[:n]]
        return None
