"""The start scripts of the real components (SLURM, Docker) serialise themselves: every xdist
worker starts them from its own fixture, and on a fresh CI machine two starts at once raced
(`mv: cannot stat slurm.conf.new`). A start must wait while another holds the lock, and no
daemon it leaves running may hold the lock's descriptor."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.docker_engine import start_docker_engine
from tests.support.postgres import start_postgres
from tests.support.realcomponents import REPO_ROOT
from tests.support.slurm_cluster import start_slurm_cluster

CASES = [
    pytest.param("slurm/start_slurm.sh", Path(os.environ.get("NEL_SLURM_DIR", "/var/lib/nel-slurm")),
                 start_slurm_cluster, {}, marks=pytest.mark.slurm, id="slurm"),
    pytest.param("docker/start_engine.sh", Path(os.environ.get("NEL_DOCKER_DIR", "/var/lib/nel-docker")),
                 start_docker_engine, {"NEL_DOCKER_PY_BASE": "1"}, marks=pytest.mark.docker, id="docker"),
    pytest.param("postgres/start_postgres.sh", Path(os.environ.get("NEL_POSTGRES_DIR", "/var/lib/nel-postgres")),
                 start_postgres, {}, id="postgres"),
]


@pytest.mark.parametrize(("script", "state_dir", "start", "env"), CASES)
def test_a_start_waits_while_another_holds_the_lock(
        script: str, state_dir: Path, start: Callable[[], str], env: dict[str, str]) -> None:
    start()  # the component is up: the script's own run is its sub-second fast path
    with open(state_dir / ".start.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(["bash", str(REPO_ROOT / "deploy" / script)],
                                env={**os.environ, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            # Without the lock the fast path ends in well under a second; 3 s of still
            # running means it waits (a slower machine could only make this pass wrongly,
            # never fail wrongly).
            time.sleep(3)
            assert proc.poll() is None, f"{script} did not wait for the lock: {proc.communicate()}"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "export " in out


@pytest.mark.parametrize(("script", "state_dir", "start", "env"), CASES)
def test_no_daemon_keeps_the_lock(
        script: str, state_dir: Path, start: Callable[[], str], env: dict[str, str]) -> None:
    start()
    with open(state_dir / ".start.lock", "w") as probe:
        # a daemon that inherited descriptor 9 would hold the lock for its whole life
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
