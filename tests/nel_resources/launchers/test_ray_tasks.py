"""The parts of `cluster.type: ray` that need no cluster: what a task is sent of the driver's
environment, how it is set and restored in a worker, and where a `ray job submit` driver may
write. The cluster itself is exercised in tests/dagster_project/test_cluster_ray_remote.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.errors import NelError
from nel_resources.launchers.forwarded_env import referenced_env
from nel_resources.launchers.partitions import PartitionJob
from nel_resources.launchers.ray_tasks import check_job_output_dir, connect, run_in_env


def test_referenced_env_takes_what_the_config_names_and_is_set(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "nel-config.yaml"
    cfg.write_text("services:\n  m: {url: '${NEL_T_URL}/v1', api_key_env: NEL_T_KEY}\n"
                   "  n: {url: '${NEL_T_UNSET}'}\n")
    monkeypatch.setenv("NEL_T_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NEL_T_KEY", "k-123")
    monkeypatch.setenv("NEL_T_OTHER", "not named")
    monkeypatch.setenv("NEL_DATA_DIR", "/data")
    monkeypatch.delenv("NEL_T_UNSET", raising=False)
    assert referenced_env(cfg) == {"NEL_T_URL": "http://127.0.0.1:9", "NEL_T_KEY": "k-123",
                                   "NEL_DATA_DIR": "/data"}


def test_run_in_env_sets_the_variables_for_the_work_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_T_KEPT", "before")
    monkeypatch.delenv("NEL_T_NEW", raising=False)
    job = PartitionJob("gsm8k", "m", 0, 1, "/nowhere/nel-config.yaml")
    seen: dict[str, str | None] = {}

    def work(j: PartitionJob) -> dict[str, str]:
        seen.update(new=os.environ.get("NEL_T_NEW"), kept=os.environ.get("NEL_T_KEPT"))
        if j.shard == 1:
            raise RuntimeError("shard failed")
        return {"shard": str(j.shard)}

    env = {"NEL_T_NEW": "n", "NEL_T_KEPT": "during"}
    assert run_in_env(work, env, job) == {"shard": "0"}
    assert seen == {"new": "n", "kept": "during"}
    assert "NEL_T_NEW" not in os.environ and os.environ["NEL_T_KEPT"] == "before"
    with pytest.raises(RuntimeError):  # restored when the work fails too
        run_in_env(work, env, PartitionJob("gsm8k", "m", 1, 2, "/nowhere/nel-config.yaml"))
    assert "NEL_T_NEW" not in os.environ and os.environ["NEL_T_KEPT"] == "before"


def _as_job_driver(monkeypatch: pytest.MonkeyPatch, cwd: Path, runtime_env: dict) -> None:
    """This process as Ray starts a job's driver: cwd in the working dir copy, the job config."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": runtime_env, "metadata": {}}))


def test_job_output_inside_its_working_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "_ray_pkg_abc"
    copy.mkdir()
    _as_job_driver(monkeypatch, copy, {"working_dir": "gcs://_ray_pkg_abc.zip"})
    for inside in ("results", ".", str(copy / "a" / "b")):
        with pytest.raises(NelError, match="inside this Ray job's working_dir copy") as exc:
            check_job_output_dir(inside)
        assert "\n" not in str(exc.value)
    check_job_output_dir(str(tmp_path / "shared" / "out"))  # outside the copy: fine
    check_job_output_dir(str(tmp_path))


def test_job_output_is_only_checked_in_a_job_with_a_working_dir(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.chdir(tmp_path)
    check_job_output_dir("results")  # a plain `nel eval run`: relative to where it runs
    _as_job_driver(monkeypatch, tmp_path, {"env_vars": {"A": "1"}})
    check_job_output_dir("results")  # a job without a working_dir: nothing of its cwd is deleted


class _FlakyRay:
    """`ray` whose init raises the given errors in turn, then joins (fault injection: the
    real head's client-server start failing under load is not reproducible on demand)."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.inits = 0
        self.shutdowns = 0

    def init(self, address: str, log_to_driver: bool) -> None:
        self.inits += 1
        if self.errors:
            raise self.errors.pop(0)

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.mark.parametrize("message", [
    "Starting Ray client server failed. See ray_client_server_23000.err",
    # the per-driver server crashed as it started (seen in CI): the proxy's psutil says so
    "ray client connection failed: psutil.ZombieProcess: PID still exists but it's a zombie "
    "(pid=28721)",
])
def test_a_client_server_that_failed_to_start_is_tried_again(message: str) -> None:
    ray = _FlakyRay(RuntimeError(message))
    connect(ray, "ray://127.0.0.1:1", pause_s=0)
    assert ray.inits == 2 and ray.shutdowns == 1


def test_client_server_failures_give_up_after_the_attempts_in_one_line() -> None:
    err = RuntimeError("Starting Ray client server failed. See ray_client_server_23000.err")
    ray = _FlakyRay(err, err, err)
    with pytest.raises(NelError) as e:
        connect(ray, "ray://127.0.0.1:1", attempts=3, pause_s=0)
    assert ray.inits == 3
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("cannot join the Ray cluster at ray://127.0.0.1:1: "
                                   "Starting Ray client server failed;")


def test_other_join_errors_are_not_retried() -> None:
    ray = _FlakyRay(ConnectionError("authentication failed"), RuntimeError("never reached"))
    with pytest.raises(NelError, match="authentication failed"):
        connect(ray, "127.0.0.1:1", pause_s=0)
    assert ray.inits == 1
