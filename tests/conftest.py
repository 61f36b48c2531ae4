"""Suite-wide fixtures (the reference server, the real llama.cpp server, the data directory)
and how the suite is spread over pytest-xdist workers.

`make test` runs `pytest -n 2 --dist loadgroup`. Each test module is one xdist group, so a
module's expensive module-scoped fixtures (servers, ingested runs) are built once, on one
worker; every test that uses the session's real llama.cpp server shares the group
``llama``, so one server serves them all. Modules are handed out longest first (measured
with `--durations`), so the last worker does not start a six-minute test at the end.
Fixtures pick ports by binding port 0 (or retry on a fresh port) and write under
``tmp_path``, which xdist keeps per worker, so workers never collide."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess
from tests.support import (
    llama_model_path,
    require_bwrap,
    require_real_component,
    start_llama_server,
)
from tests.support import server_stats as _server_stats
from tests.support.nemo_gym import shared_gym  # noqa: F401  (the suite's one NeMo Gym stack)

#: Modules that take longest (seconds of one test run each, `--durations` under load on
#: 2026-11-22), handed to xdist workers first. A module not listed just runs later.
LONGEST_FIRST = (
    "tests/dagster_project/test_stale_only.py",  # 374 s at 8 shards, 343 s at 4
    "tests/dagster_project/test_slurm_arrays.py",  # ~350 s (auto_resume waits on a real TIMEOUT)
    "tests/dagster_project/test_slurm_het.py",  # ~60 s (heterogeneous jobs wait on backfill passes)
    "tests/dagster_project/test_jobs.py",  # 167 s
    "tests/dagster_project/test_daemon_checkpoint.py",  # 166 s
    # The modules of the `nemo_gym` group share one ng_run (tests/support/nemo_gym.py):
    # together 288 s at load average 12 (2026-11-23), most of it starting Gym's stack once.
    "tests/benchmarks/test_gym_rollouts.py",
    "tests/nel_assets/engine/solvers/test_gym_solvers.py",
    "tests/dagster_project/test_gym_solvers_e2e.py",
    "tests/dagster_project/test_cluster_ray.py",  # ~147 s under load (two local Ray clusters)
    "tests/dagster_project/test_cluster_ray_remote.py",  # ~100 s at load 5 (a Ray head, 2 jobs)
    "tests/dagster_project/test_report_cli.py",  # 130 s with its fixture
    "tests/dagster_project/test_cluster_docker.py",  # ~124 s under load (+ a first image build)
    "tests/deploy/test_docker_compose_up.py",  # ~175 s at load 12-15 (+ the Postgres image, once)
    "tests/dagster_project/test_eval_run.py",  # ~120 s over its tests
    "tests/dagster_project/test_ui_browser.py",  # 86 s
    "tests/dagster_project/test_builtin_e2e.py",  # ~100 s over its tests
    "tests/dagster_project/test_harbor_solver_e2e.py",  # ~100 s alone (3 terminus-2 runs + a 20 s timeout)
    "tests/dagster_project/test_openclaw_e2e.py",  # ~47 s at load 3 (3 OpenClaw runs at once)
    "tests/dagster_project/test_compare_gate_cli.py",  # ~110 s with its fixture
    "tests/dagster_project/test_peer_results_read.py",  # 90 s under load (real peer runs)
)
LLAMA_GROUP = "llama"


def xdist_group_of(item: pytest.Item) -> str:
    """The xdist group of a test: ``llama`` if it needs the shared llama.cpp server, else
    its module (so module-scoped fixtures are set up once)."""
    if "llama_server" in getattr(item, "fixturenames", ()):
        return LLAMA_GROUP
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (its hook is a plain one)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group tests for `--dist loadgroup` and order the longest modules first."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    # Stable sort: collection order within a module and among unlisted modules.
    items.sort(key=lambda it: rank.get(it.nodeid.split("::", 1)[0], len(rank)))
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
    if getattr(config.option, "loadgroup", False):  # set on xdist workers by --dist loadgroup
        for item in items:
            _tag_with_group(item)


def _tag_with_group(item: pytest.Item) -> None:
    """Append `@<group>` to the test's node id, as `--dist loadgroup` needs to keep a group on
    one worker. pytest-xdist 3.8 does this by setting `item._nodeid`, which pytest 9 no longer
    reads (the id lives in `item._id`): without this every test was scheduled on its own, and
    module fixtures (Gym's `ng_run`, the llama.cpp server) started once per worker."""
    from _pytest.nodeid import coerce_node_id

    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if names and "@" not in item.nodeid.rpartition("]")[2]:
        item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def isolated_user_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test (nor any process it starts) reads the developer's `nel config` file.

    Points ``NEL_USER_CONFIG`` at a file that does not exist in this session's (per xdist
    worker) temp dir; tests that exercise `nel config` point it elsewhere themselves.
    """
    path = tmp_path_factory.mktemp("user-config") / "config.yaml"
    mp = pytest.MonkeyPatch()
    mp.setenv("NEL_USER_CONFIG", str(path))
    # nor writes to the developer's index of runs (`nel eval jobs`)
    mp.setenv("NEL_RUNS_DIR", str(path.parent / "runs"))
    # nor hands its runs to a developer's nel daemon (tests of the daemon start their own)
    mp.setenv("NEL_DAEMON_DIR", str(path.parent / "daemon"))
    try:
        yield path
    finally:
        # A run at a (pseudo-)terminal outside CI starts a daemon by default (`auto`): none
        # outlives the session.
        if list((path.parent / "daemon").glob("*.sock")):
            import subprocess
            import sys

            subprocess.run([sys.executable, "-m", "dagster_project.cli.main", "daemon", "stop", "--all"],
                           capture_output=True, timeout=120, check=False,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        mp.undo()


@contextmanager
def _data_root_restored() -> Iterator[None]:
    """Put `benchmarks.datasets`' process-wide data root back as it was, on the way out."""
    from benchmarks import datasets

    before = datasets._DATA_DIR_OVERRIDE
    try:
        yield
    finally:
        datasets._DATA_DIR_OVERRIDE = before


@pytest.fixture(autouse=True)
def data_root_set_by_a_test_does_not_leak() -> Iterator[None]:
    """The config's `data_dir` is a process-wide setting (`benchmarks.datasets.set_data_dir`,
    set by every in-process run): a test that sets it must not hand it to the next test of
    the same worker, which may point NEL_DATA_DIR elsewhere."""
    with _data_root_restored():
        yield


@pytest.fixture(scope="module", autouse=True)
def data_root_set_in_a_module_does_not_leak() -> Iterator[None]:
    """The same for module-scoped fixtures (`humaneval` below sets the data root for its
    module, before any test's own guard above runs): the next module on the worker starts
    from the value before. Without it, tests/benchmarks/test_agentic.py after a module using
    `humaneval` on the same worker found the shared data instead of its empty folder."""
    with _data_root_restored():
        yield


@pytest.fixture(scope="session", autouse=True)
def first_n_selection_by_default() -> Iterator[None]:
    """Tests written before nel picked `max_problems` items as NeMo Evaluator does (a
    permutation seeded by `shuffle_seed`, 42 by default) build their answer files for the
    first N problems: they run with NEL_SHUFFLE_SEED=null (the dataset order). The tests of
    the selection itself (tests/dagster_project/test_eval_run_flags.py, the peer parity
    module) unset it to check the real default.
    """
    with _session_env("NEL_SHUFFLE_SEED", "null"):
        yield


@pytest.fixture(scope="session", autouse=True)
def dagster_recording_in_the_command() -> Iterator[None]:
    """`nel eval run` records a plain run in Dagster from a process that goes on after the
    command returned (dagster_project.background_recording). Tests that read the instance,
    the run lock or the processes left right after a command were written for a command that
    records before it returns: they run with NEL_RECORD_INLINE=1. The background recording
    itself is tested in tests/dagster_project/test_background_recording.py, which unsets it.
    """
    with _session_env("NEL_RECORD_INLINE", "1"):
        yield


@contextmanager
def _session_env(name: str, value: str) -> Iterator[None]:
    """`name=value` in this process's environment (inherited by every process a test
    starts) until the block ends."""
    mp = pytest.MonkeyPatch()
    mp.setenv(name, value)
    try:
        yield
    finally:
        mp.undo()


@pytest.fixture
def reference_server() -> Iterator[Callable[..., str]]:
    """Factory: ``reference_server(**opts) -> "http://127.0.0.1:PORT/v1"``.

    ``opts`` are the reference server's options in snake_case (``fail_rate=0.2``,
    ``reasoning_mode="think"``, ``answers=[{"match": ..., "content": ...}]`` or a JSONL
    path, ...). Every server started is stopped at teardown; the processes are available as
    ``reference_server.processes`` (base URL -> ManagedProcess) for log inspection.
    """
    processes: dict[str, ManagedProcess] = {}

    def start(**opts: Any) -> str:
        proc, base_url = start_reference_server(**opts)
        processes[base_url] = proc
        return base_url

    start.processes = processes  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for proc in processes.values():
            proc.stop()


@pytest.fixture
def server_stats() -> Callable[[str], dict[str, Any]]:
    """The ``server_stats(base_url) -> dict`` helper (``GET /stats``) as a fixture."""
    return _server_stats


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """A real llama.cpp server with the tiny stories260K model; yields ``…/v1``.

    Skipped when llama_cpp or the model is missing, except in CI (``CI=true``) where it fails.
    """
    proc, base_url = start_llama_server(llama_model_path())
    try:
        yield base_url
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark data (``NEL_DATA_DIR``); skipped when unset, failed in CI."""
    value = os.environ.get("NEL_DATA_DIR")
    if not value:
        require_real_component("NEL_DATA_DIR is not set (point it at shared/datasets)")
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        require_real_component(f"NEL_DATA_DIR={value} is not a directory")
    return path


@pytest.fixture(scope="module")
def humaneval(data_dir: Path) -> Any:
    """The built-in HumanEval environment on the real data (`NEL_DATA_DIR`)."""
    from benchmarks import get_benchmark
    from benchmarks.builtin.humaneval import HumanEval
    from benchmarks.datasets import set_data_dir

    set_data_dir(data_dir)
    env = get_benchmark("humaneval")
    assert isinstance(env, HumanEval)
    return env


@pytest.fixture(scope="session")
def bwrap() -> None:
    """Bubblewrap for the `local` sandbox (skip locally / fail in CI without it)."""
    require_bwrap()


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """The project's Docker engine (deploy/docker/start_engine.sh), its DOCKER_HOST exported
    for the docker CLI the sandboxes and `nel package` run."""
    from tests.support.docker_engine import start_docker_engine

    host = start_docker_engine()
    mp = pytest.MonkeyPatch()
    mp.setenv("DOCKER_HOST", host)
    try:
        yield host
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def nel_image(docker_host: str) -> str:
    """nel:local, built (or found up to date: its `nel.context` label) on the project's own
    Docker engine. The modules using it share the xdist group NEL_IMAGE_GROUP, so two
    workers never build it at once."""
    from nel_resources.launchers.docker import LOCAL_TAG
    from nel_resources.launchers.nel_image import build_nel_image

    build_nel_image(LOCAL_TAG)
    return LOCAL_TAG
