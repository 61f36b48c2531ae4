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


@pytest.mark.slurm
# On the worker of the arrays module (xdist): that module's tests count on its cluster's CPUs.
@pytest.mark.xdist_group("tests/dagster_project/test_slurm_arrays.py")
def test_the_second_slurm_cluster_runs_heterogeneous_jobs_on_its_own_nodes(tmp_path: Path) -> None:
    """The second cluster (NEL_SLURM_PORT=6837, tests/support/slurm_cluster.ARRAYS_CLUSTER)
    gets its own `<host>-het` node, its slurmd on 6837+3 rather than the default cluster's
    6820, so a heterogeneous job starts there too; and its start is idempotent."""
    from nel_resources.launchers.resource import SlurmLauncherResource
    from nel_resources.launchers.slurm import SbatchHeader, render_het_script
    from tests.dagster_project.test_slurm_arrays import MAX_ARRAY_SIZE
    from tests.support.slurm_cluster import ARRAYS_CLUSTER

    conf = start_slurm_cluster(separate=ARRAYS_CLUSTER, max_array_size=MAX_ARRAY_SIZE, cpus=8)
    again = subprocess.run(["bash", str(REPO_ROOT / "deploy" / "slurm" / "start_slurm.sh")],
                           env={**os.environ, **ARRAYS_CLUSTER, "NEL_SLURM_MAX_ARRAY_SIZE": str(MAX_ARRAY_SIZE),
                                "NEL_SLURM_CPUS": "8"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already up" in again.stderr, again.stderr
    env = {**os.environ, "SLURM_CONF": conf}
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %P"], env=env, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    assert sorted(n for n in nodes if n) == [f"{host} debug*", f"{host} multi", f"{host}-het het",
                                             f"{host}-het multi"]
    shown = subprocess.run(["scontrol", "show", "node", f"{host}-het"], env=env, capture_output=True,
                           text=True, check=True).stdout
    assert " Port=6840 " in shown, shown

    launcher = SlurmLauncherResource(slurm_conf=conf, poll_seconds=0.2).launcher()
    log = str(tmp_path / "h-%j.log")
    script = tmp_path / "h.sbatch"
    script.write_text(render_het_script(
        [SbatchHeader("nel-het", log, walltime="00:05:00", partition="debug"),
         SbatchHeader("nel-het", log, walltime="00:05:00", partition="het")],
        'echo "comp0 on $SLURMD_NODENAME"; srun --het-group=1 --ntasks=1 bash -c \'echo "comp1 on $SLURMD_NODENAME"\''))
    job = launcher.submit(script)
    states = launcher.wait([job])
    assert list(states) == [job] and states[job].state == "COMPLETED", states
    lines = (tmp_path / f"h-{job}.log").read_text().splitlines()
    assert f"comp0 on {host}" in lines and f"comp1 on {host}-het" in lines, lines


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_postgres_moves_to_a_changed_port() -> None:
    """A server of the cluster still listening on another port (an older default, 55432,
    sat in Linux's ephemeral range, where an outgoing connection held it once in CI) is
    restarted on the configured one, and the printed URL reaches it there."""
    import shutil
    import tempfile

    import psycopg2

    start_postgres()  # the Debian package installed (the fixture's own cluster is not touched)
    # Not under pytest's tmp dir: the server runs as `postgres`, which cannot enter root's 0700 dirs.
    d = Path(tempfile.mkdtemp(prefix="nel-pg-", dir="/var/tmp"))
    d.chmod(0o755)
    script = REPO_ROOT / "deploy" / "postgres" / "start_postgres.sh"
    ports = [_free_port(), _free_port()]
    try:
        for port in ports:
            proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300,
                                  env={**os.environ, "NEL_POSTGRES_DIR": str(d), "NEL_POSTGRES_PORT": str(port)})
            assert proc.returncode == 0, proc.stderr
            url = proc.stdout.strip().removeprefix("export NEL_DAGSTER_POSTGRES_URL=")
            assert f"@127.0.0.1:{port}/" in url
            conn = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1))
            conn.close()
        assert "restarting it on 127.0.0.1:" in proc.stderr
    finally:
        bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        subprocess.run(["runuser", "-u", "postgres", "--", str(bindir / "pg_ctl"), "-D", str(d / "data"),
                        "-m", "immediate", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slurm
def test_an_mpi_step_over_two_nodes_gets_one_pmix_world() -> None:
    """`srun --mpi=pmix` (TRT-LLM's multi-node form) works on a cluster start_slurm.sh set up:
    it installs the PMIx library the plugin loads ("pmi/pmix: can not load PMIx library"
    otherwise), restarts a slurmd older than it, and gives each node its own TmpFS (the two
    slurmd of one host collided on the plugin's /tmp directory)."""
    from tests.support.slurm_cluster import GPU_CLUSTER

    env = {**os.environ, "SLURM_CONF": start_slurm_cluster(separate=GPU_CLUSTER)}
    proc = subprocess.run(
        ["srun", "--mpi=pmix", "--partition=multi", "--nodes=2", "--ntasks-per-node=2", "--time=1",
         "bash", "-c", 'echo "$SLURMD_NODENAME $SLURM_PROCID $PMIX_RANK $PMIX_NAMESPACE"'],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = sorted(line.split() for line in proc.stdout.splitlines())
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert [g[:3] for g in got] == [[host, "0", "0"], [host, "1", "1"], [f"{host}-het", "2", "2"],
                                    [f"{host}-het", "3", "3"]], proc.stdout
    assert len({g[3] for g in got}) == 1 and got[0][3].startswith("slurm.pmix."), proc.stdout
