"""`Launcher`: the one interface every `cluster.type` implements (local, docker, ray, slurm,
k8s), and what the runner hands it.

A launcher owns its checks and its way of running the stale (model, shard) partitions:

- `refusal(cfg)`: the first `cluster:` setting it cannot honour, as one line (config time,
  so `--dry-run` refuses what a run would refuse);
- `preflight(resolved)`: what must hold on this machine before anything is written (an
  engine reachable, an image built, a client command installed);
- how the partitions run, by `runs`:
  `here`: the runner evaluates them in this process (local);
  `partitions`: the runner hands each benchmark's stale partitions to `run()`, which returns
  one `PartitionResult` per job (how it ended), and records them in Dagster (docker, ray);
  `submits`: `submit()` takes the whole `nel eval run` over, submitting jobs that evaluate
  and record themselves (slurm, k8s); the Dagster side reaches it through `RunHooks`;
- `states(out)`: how the partitions it last launched from output dir `out` stand (what
  `run` reported through `LaunchContext.report`, or the cluster's own view: SLURM's).

A type's own settings live in its block, `cluster.<type>:` (`cluster.docker`, ...), which
the schema accepts for every registered type and the type's `refusal` checks.

Launchers are found by name in `nel_resources.launchers.registry.LAUNCHERS`. No Dagster here:
what needs Dagster (planning, recording, the merge) comes in through `LaunchContext.work` and
`RunHooks`, implemented in dagster_project.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from nel_resources.launchers.partitions import PartitionJob, PartitionResult
from nel_resources.launchers.states import PartitionState, read_states

if TYPE_CHECKING:
    from nel_resources.config import NelConfig
    from nel_resources.config.deployment import ClusterConfig

# `cluster:` keys every type accepts (nel's own, and the other types' blocks, which
# `refusal` refuses by name so the message says which type reads them).
COMMON_KEYS = frozenset({"shards", "slurm", "k8s", "docker", "ray"})
# NeMo Evaluator's container keys of the docker and slurm cluster types.
CONTAINER_KEYS = frozenset({"container_mounts", "container_env", "mount_home", "shm_size"})


@dataclass(frozen=True)
class Refusal:
    """One setting a launcher cannot honour, said in one line.

    The config package turns it into `file:line: key <path>: <message>` (`bare`: the message
    already names the key, `file:line: <message>`).
    """

    path: tuple[str | int, ...]
    message: str
    bare: bool = False

    @classmethod
    def unbuilt(cls, path: tuple[str | int, ...], feature: str, instead: str) -> Refusal:
        """A feature nel does not have yet: `<feature> is not supported yet in nel; <instead>`."""
        return cls(path, f"{feature} is not supported yet in nel; {instead}")

    @classmethod
    def unavailable(cls, path: tuple[str | int, ...], what: str, fix: str) -> Refusal:
        """A feature that cannot run on this machine: `<what>; <fix>`."""
        return cls(path, f"{what}; {fix}")


@dataclass
class LaunchContext:
    """What a `partitions` launcher is given besides the jobs.

    Attributes:
        cluster: the run's `cluster:` block.
        output_dir: the shared Parquet store the workers commit into.
        read_only: what the workers read besides the output (data dir, BYOB modules).
        work: the shard worker, `work(job) -> outcome dict` (for launchers that run it in a
            Python process of theirs, as Ray does); injected so no engine is imported here.
        report: `report(job, state, detail)` when a job's state changes (RUNNING, ...);
            the runner records them for `Launcher.states`.
    """

    cluster: ClusterConfig
    output_dir: Path
    read_only: list[Path] = field(default_factory=list)
    work: Callable[[PartitionJob], dict[str, Any]] | None = None
    report: Callable[..., None] = field(default=lambda job, state, detail="": None)


class RunHooks(Protocol):
    """The runner's side of a `submits` launcher (implemented in dagster_project): what
    needs the engine or the Dagster instance."""

    def validate(self, cfg: NelConfig) -> Any:
        """Every config check; the resolved config (NelError, one line, if refused)."""

    def prepare_output(self, cfg: NelConfig) -> tuple[Path, Path]:
        """The output dir and Dagster home, created."""

    def evaluate(self, cfg: NelConfig, **options: Any) -> Any:
        """A local run's evaluation of `cfg` (dagster_project.runner.run_eval with
        `options`: `only`, `merge_only`, `elsewhere`, `resume`, ...); its summary."""

    def dagster_home(self, cfg: NelConfig) -> Path:
        """The run's Dagster home."""

    def plan(self, out: Path, bench: Any) -> list[Any]:
        """A benchmark's shard tasks against the store at `out` (`.model`, `.shard`,
        `.total`, `.stale`, `.reason`, `.indices`): what a local run would evaluate."""

    def failure(self, benchmark: str, model: str, exc: BaseException, stage: str) -> Any:
        """A (benchmark, model) that failed before submission (`finish` reports it)."""

    def record_planned(self, home: Path, models: set[str]) -> None:
        """The model partitions exist in the Dagster instance before any job starts."""

    def record_outcome(self, home: Path, asset_name: str, model: str, shard: int,
                       metadata: dict[str, Any]) -> None:
        """How one partition's job ended, recorded on that partition."""

    def finish(self, cfg: NelConfig, failures: list[Any], ran: list[Any] | None,
               submitted: list[Any] | None) -> tuple[int, Any]:
        """The run's summary, read from the store as a local run reports it: `ran` are the
        partitions (`.benchmark`, `.model`, `.shard`, `.reason`) the jobs evaluated,
        `submitted` all those submitted. (exit status, summary)."""


@dataclass(frozen=True)
class SubmitOptions:
    """How `nel eval run` asked for a `submits` run."""

    argv: Sequence[str] = ()  # the CLI's own arguments (a job reruns them)
    resume: bool = True  # False: --fresh
    wait: bool = True  # False: --no-wait / --background
    submit: bool | None = None  # --submit / --no-submit; None: the config's `cluster.submit`


class Launcher:
    """Base of every cluster type; see the module docstring."""

    #: the `cluster.type` (aliases in registry.ALIASES).
    kind: ClassVar[str] = ""
    #: `cluster:` keys this type reads (others are refused when the config loads).
    keys: ClassVar[frozenset[str]] = COMMON_KEYS
    #: how the stale partitions run: `here`, `partitions` or `submits` (module docstring).
    runs: ClassVar[Literal["here", "partitions", "submits"]] = "here"
    #: what `--submit` does: `note` (nothing; nel starts the work itself, said on stderr),
    #: `submit` (submits), or a refusal (one line) when it cannot be honoured.
    submit_flag: ClassVar[str] = "note"

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """The first `cluster:` setting this type cannot honour, else None. The base
        refuses another type's block (it would be silently ignored)."""
        from nel_resources.launchers.registry import LAUNCHERS

        c = cfg.cluster
        for block in LAUNCHERS:
            if block != self.kind and c.block(block):
                return Refusal.unbuilt(("cluster", block), f"a `{block}:` block in a {c.type} cluster "
                                       f"(only `type: {block}` reads it)",
                                       f"remove `{block}:` or set `type: {block}`")
        return None

    def preflight(self, resolved: Any) -> None:
        """Before anything is written: NelError (one line) when this machine cannot launch."""

    def states(self, out: Path) -> list[PartitionState]:
        """How the partitions last launched from output dir `out` stand, one per partition
        (what `run` or `submit` reported; [] when this type launched nothing there)."""
        return [s for s in read_states(out) if s.cluster in ("", self.kind)]

    def resources(self) -> dict[str, Any]:
        """Dagster resources the definitions show for this type (the UI's launcher)."""
        return {}

    def run(self, jobs: list[PartitionJob], ctx: LaunchContext) -> list[PartitionResult]:
        """`partitions` launchers: evaluate `jobs` elsewhere; one result per job, in order
        (a failed job fails alone)."""
        raise NotImplementedError(f"cluster.type {self.kind} does not run partitions itself")

    def submit(self, cfg: NelConfig, hooks: RunHooks, opts: SubmitOptions) -> tuple[int, Any]:
        """`submits` launchers: run the whole `nel eval run`; (exit status, summary or None)."""
        raise NotImplementedError(f"cluster.type {self.kind} does not submit")
