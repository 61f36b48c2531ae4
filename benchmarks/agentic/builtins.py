"""NeMo Evaluator 0.3.0's agent benchmarks, read from local copies of their task files.

NeMo Evaluator downloads these on first use (git clones, a zip, the Harbor registry); nel
never downloads them: it reads the task files where the user put them and refuses, in one
line naming the directory it looked in, where there are none. `nel data info <name>` says
how to get each one.

Where nel looks, first match wins:
1. the benchmark's `params.tasks_dir` in the config;
2. `<NEL_DATA_DIR>/<name>/`, then `<nel cache>/<name>/`;
3. for the Harbor datasets, NeMo Evaluator's own cache,
   `$HARBOR_DATASETS_DIR/<dataset>@<version>/` (default `./harbor_datasets`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment
from benchmarks.agentic.harbor_tasks import HarborTaskSet
from benchmarks.agentic.pinchbench import PinchBenchTasks
from benchmarks.datasets import cache_root, data_root
from benchmarks.errors import DataMissingError


@dataclass(frozen=True)
class AgentBenchmark:
    """One agent benchmark: its format, where NeMo Evaluator caches it, how to get it."""

    name: str
    format: str  # "harbor" (task directories) or "pinchbench" (tasks/task_*.md)
    harbor_cache: str | None  # `<dataset>@<version>` under HARBOR_DATASETS_DIR, if any
    how_to_get: str


AGENT_BENCHMARKS: dict[str, AgentBenchmark] = {b.name: b for b in (
    AgentBenchmark("terminal-bench-v1", "harbor", "terminal-bench@1.0",
                   "clone https://github.com/laude-institute/terminal-bench and convert its "
                   "tasks to Harbor task directories (NeMo Evaluator 0.3.0 leaves them in "
                   "harbor_datasets/terminal-bench@1.0/ after its first run), then point nel at "
                   "that folder"),
    AgentBenchmark("terminal-bench-hard", "harbor", None,
                   "copy the 47 Terminal-Bench Hard task directories (the leaderboard subset of "
                   "terminal-bench@1.0) into one folder"),
    AgentBenchmark("nmp_harbor", "harbor", None,
                   "use the `tests/agentic-use` folder of an NMP checkout ($NMP_REPO); its tasks "
                   "are built FROM the nmp-harbor:latest image, which must be built locally from "
                   "$NMP_REPO/Dockerfile.harbor"),
    AgentBenchmark("swebench-verified", "harbor", "swebench-verified@1.0",
                   "fetch the Harbor dataset swebench-verified@1.0 (Harbor's registry, or a "
                   "NeMo Evaluator 0.3.0 run's harbor_datasets/swebench-verified@1.0/)"),
    AgentBenchmark("swebench-multilingual", "harbor", "swebench-multilingual@1.0",
                   "fetch the Harbor dataset swebench-multilingual@1.0 (Harbor's registry, or a "
                   "NeMo Evaluator 0.3.0 run's harbor_datasets/swebench-multilingual@1.0/)"),
    AgentBenchmark("pinchbench", "pinchbench", None,
                   "download https://github.com/pinchbench/skill at v2.0.0 (commit 47efe9bf) and "
                   "point nel at the checkout (the folder holding tasks/task_*.md)"),
)}


def harbor_datasets_dir() -> Path:
    """NeMo Evaluator's Harbor cache (`HARBOR_DATASETS_DIR`, default `./harbor_datasets`)."""
    return Path(os.environ.get("HARBOR_DATASETS_DIR", "./harbor_datasets")).expanduser()


def candidate_dirs(name: str, tasks_dir: str | None = None) -> list[Path]:
    """Every directory nel looks in for `name`'s task files, in order."""
    if tasks_dir:
        return [Path(tasks_dir).expanduser()]
    roots = [r for r in (data_root(), cache_root()) if r is not None]
    out = [r / name for r in roots]
    bench = AGENT_BENCHMARKS.get(name)
    if bench is not None and bench.harbor_cache:
        out.append(harbor_datasets_dir() / bench.harbor_cache)
    if name == "nmp_harbor" and os.environ.get("NMP_REPO"):
        out.append(Path(os.environ["NMP_REPO"]) / "tests" / "agentic-use")
    return out


def locate(name: str, tasks_dir: str | None = None) -> Path:
    """The first directory holding `name`'s task files.

    Raises:
        DataMissingError: one line naming where nel looked and how to get the files.
    """
    dirs = candidate_dirs(name, tasks_dir)
    for d in dirs:
        if d.is_dir():
            return d
    where = " or ".join(str(d) for d in dirs)
    raise DataMissingError(f"{name}: no local task files in {where} (nel downloads nothing); "
                           f"see `nel data info {name}`, or set `params.tasks_dir`")


def _factory(bench: AgentBenchmark) -> Any:
    def make(*, tasks_dir: str | None = None, num_examples: int | None = None) -> EvalEnvironment:
        root = locate(bench.name, tasks_dir)
        if bench.format == "pinchbench":
            env: EvalEnvironment = PinchBenchTasks(root, num_examples=num_examples)
        else:
            env = HarborTaskSet(root, label=bench.name, num_examples=num_examples)
        env.name = bench.name
        return env

    make.__name__ = bench.name.replace("-", "_")
    make.__doc__ = f"{bench.name}: agent tasks from local task files ({bench.format} format)."
    make.needs_task_files = True  # type: ignore[attr-defined]  # `nel list` says so
    make.needs_sandbox = True  # type: ignore[attr-defined]
    make.task_format = bench.format  # type: ignore[attr-defined]  # what `nel eval run` can verify
    make.scorer_family = "agent"  # type: ignore[attr-defined]  # the type `nel list` shows
    if bench.format == "pinchbench":  # its judge and automated checks: pinchbench_grading
        make.judge_kind = "pinchbench"  # type: ignore[attr-defined]
        make.requires_judge = True  # type: ignore[attr-defined]  # 0.3.0's playbook has one
    return make


# The factories `benchmarks._registry.BUILTINS` names, one per agent benchmark (a
# benchmark's attribute name is its name with `-` as `_`).
FACTORIES: dict[str, Any] = {b.name: _factory(b) for b in AGENT_BENCHMARKS.values()}
terminal_bench_v1 = FACTORIES["terminal-bench-v1"]
terminal_bench_hard = FACTORIES["terminal-bench-hard"]
nmp_harbor = FACTORIES["nmp_harbor"]
swebench_verified = FACTORIES["swebench-verified"]
swebench_multilingual = FACTORIES["swebench-multilingual"]
pinchbench = FACTORIES["pinchbench"]


def harbor_cache_dir(rest: str) -> Path:
    """Where `harbor://<name>@<version>` is cached (NeMo Evaluator's layout: `/` -> `__`)."""
    return harbor_datasets_dir() / rest.replace("/", "__")


def harbor_uri_tasks(uri: str) -> HarborTaskSet:
    """`harbor://<name>@<version>` from its local cache.

    Raises:
        DataMissingError: one line when there is no cache: the Harbor registry cannot be
            reached from here, so nothing is downloaded.
    """
    rest = uri.partition("://")[2]
    d = harbor_cache_dir(rest)
    if not d.is_dir():
        raise DataMissingError(
            f"{uri}: no local Harbor task cache at {d}, and the Harbor registry cannot be reached "
            "from here (nel downloads nothing); copy the dataset's task directories there "
            "(or set HARBOR_DATASETS_DIR to the folder holding it)")
    return HarborTaskSet(d, label=uri)


def harbor_uri_factory(uri: str) -> Any:
    """The factory of a `harbor://<name>@<version>` benchmark (its cache is read when it is
    made: `harbor_uri_tasks`)."""
    def make(*, num_examples: int | None = None) -> EvalEnvironment:
        env = harbor_uri_tasks(uri)
        if num_examples is not None:
            env.tasks = env.tasks[:num_examples]
        return env

    make.needs_task_files = True  # type: ignore[attr-defined]
    make.needs_sandbox = True  # type: ignore[attr-defined]
    make.task_format = "harbor"  # type: ignore[attr-defined]
    return make
