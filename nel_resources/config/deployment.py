"""`cluster:` (where shards run) and `output:` (where results and exports go)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_serializer, model_validator

from nel_resources.config._base import _Strict, key_error

_WALLTIME_RE = re.compile(r"^(\d+-)?\d+:\d{2}:\d{2}$")


class NodePool(_Strict):
    """A named group of SLURM nodes (`cluster.node_pools.<name>`)."""

    partition: str
    nodes: int = Field(1, ge=1)
    ntasks_per_node: int = Field(1, ge=1)
    gres: str | None = None
    gpus_per_node: int | None = Field(None, ge=1)
    sbatch_extra_flags: dict[str, str | int | float | bool] = Field(default_factory=dict)


class ClusterConfig(_Strict):
    """Where shards run: locally, or spread on SLURM / Kubernetes / Docker / Ray."""

    # a name of nel_resources.launchers.registry.LAUNCHERS (or an alias); the type and the
    # keys each type takes are checked by nel_resources.checks.schema (the launcher's own keys)
    type: str = "local"
    shards: int | None = Field(None, ge=1)
    slurm: dict[str, Any] = Field(default_factory=dict)
    k8s: dict[str, Any] = Field(default_factory=dict)
    docker: dict[str, Any] = Field(default_factory=dict)
    ray: dict[str, Any] = Field(default_factory=dict)
    # NeMo Evaluator's local / docker / slurm cluster keys.
    gpus: list[int] | None = None
    max_memory: str | None = None
    container_env: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    container_mounts: list[str] = Field(default_factory=list)
    mount_home: bool = True
    shm_size: str | None = None
    account: str | None = None
    walltime: str = "04:00:00"
    node_pools: dict[str, NodePool] = Field(default_factory=dict)
    conda_env: str | None = None
    eval_image: str | None = None
    auto_resume: bool = True
    max_retries: int = Field(3, ge=0)
    max_walltime: str | None = None
    sbatch_comment: str | None = None
    sbatch_extra_flags: dict[str, str | int | float | bool] = Field(default_factory=dict)
    hostname: str | None = None
    username: str | None = None
    submit: bool | None = None
    # `cluster.<type>:` of a type that has no field above (a mapping under a key that is not a
    # field): its own settings, kept here and checked after the schema by
    # nel_resources.checks.schema (a key that names no cluster type is an unknown key there)
    # and by its Launcher, so a new cluster type needs no edit to this file.
    _blocks: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _type_blocks(cls, data: Any, handler: Any) -> Any:
        blocks = ({k: v for k, v in data.items() if isinstance(k, str)
                   and k not in cls.model_fields and not any(
                       k == f.alias for f in cls.model_fields.values())}
                  if isinstance(data, dict) else {})
        model = handler({k: v for k, v in data.items() if k not in blocks} if blocks else data)
        model._blocks = {k: dict(v) if isinstance(v, dict) else v for k, v in blocks.items()}
        return model

    @model_serializer(mode="wrap")
    def _dump_blocks(self, handler: Any) -> dict[str, Any]:
        return {**handler(self), **{k: v for k, v in self._blocks.items() if v}}

    def block(self, kind: str) -> dict[str, Any]:
        """The settings block of cluster type `kind` (`cluster.<kind>:`; {} when absent)."""
        own = getattr(self, kind, None) if kind in type(self).model_fields else self._blocks.get(kind)
        return own if isinstance(own, dict) else {}

    def extra_blocks(self) -> dict[str, Any]:
        """`cluster.<key>:` values under keys that are not fields (checked after the schema)."""
        return dict(self._blocks)

    @field_validator("walltime", "max_walltime")
    @classmethod
    def _walltime(cls, v: str | None) -> str | None:
        if v is not None and not _WALLTIME_RE.match(v):
            raise ValueError(f"write a SLURM time, HH:MM:SS or D-HH:MM:SS (got {v!r})")
        return v

    @field_validator("sbatch_extra_flags")
    @classmethod
    def _flags(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, val in v.items():
            if not re.match(r"^[a-zA-Z][a-zA-Z0-9_-]*$", key):
                raise ValueError(f"{key!r} is not an sbatch flag name")
            if isinstance(val, str) and "\n" in val:
                raise ValueError(f"the value of sbatch flag {key!r} must be one line")
        return v

    @model_validator(mode="after")
    def _pools(self) -> ClusterConfig:
        if self.type == "slurm" and not self.node_pools and not self.slurm:
            raise key_error("node_pools", "a slurm cluster needs `node_pools` (e.g. "
                            "`gpu: {partition: batch, nodes: 1, gres: 'gpu:8'}`)")
        return self


KNOWN_REPORTS = ("markdown", "html", "csv", "json", "latex")


# Linux's limits on a path and on one name in it (bytes).
_PATH_MAX = 4095
_NAME_MAX = 255


def path_length_problem(path: str) -> str | None:
    """Why the OS would refuse `path` as too long (ENAMETOOLONG, found only once nel
    starts writing there), or None."""
    size = len(path.encode())
    if size > _PATH_MAX:
        return f"the path is {size:,} bytes long; the limit is {_PATH_MAX:,}"
    longest = max(path.split("/"), key=lambda part: len(part.encode()))
    if len(longest.encode()) > _NAME_MAX:
        return (f"the path has a {len(longest.encode()):,}-byte component ({longest[:20]!r}...); "
                f"each may have at most {_NAME_MAX}")
    return None


class OutputConfig(_Strict):
    """Where results go (`dir`), which reports are written and where results are exported.

    nel's older `exports:` spelling is read as `export`.
    """

    dir: str = Field("./eval_results", min_length=1)
    dagster_home: str | None = None
    export: list[str | dict[str, Any]] = Field(default_factory=list)
    export_config: dict[str, dict[str, Any]] = Field(default_factory=dict)
    report: list[str] = Field(default_factory=lambda: ["markdown"])
    # None = nel's layout (one stable directory, so reruns only evaluate stale shards).
    timestamped: bool | None = None
    progress_interval: float | None = Field(None, gt=0)
    # nel's `messages` key in trajectories.jsonl: the conversation `trajectory` already holds
    # (~21% of the file), which 0.3.0 neither writes nor reads; off unless asked.
    trajectory_messages: bool = False

    @field_validator("dir", "dagster_home")
    @classmethod
    def _path_fits(cls, v: str | None) -> str | None:
        problem = path_length_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "exports" in data:
            data = dict(data)
            exports = data.pop("exports")
            if data.get("export") not in (None, [], exports):
                raise key_error("exports", "give `export` or `exports`, not both (write `export`)")
            data["export"] = exports
        return data

    @model_validator(mode="after")
    def _known(self) -> OutputConfig:
        # Exporter names are checked after the schema, against the exporter registry
        # (nel_resources.checks.schema): a new exporter needs no edit here.
        for i, fmt in enumerate(self.report):
            if fmt not in KNOWN_REPORTS:
                raise key_error(f"report.{i}", f"unknown report format {fmt!r}; the formats "
                                f"are {', '.join(KNOWN_REPORTS)}")
        return self

    def exporter_names(self) -> list[str]:
        """The exporters asked for, by name."""
        return [str(e.get("type") if isinstance(e, dict) else e) for e in self.export]
