"""The SLURM cluster (this machine as two nodes, partitions `debug` and `het`) for the
`slurm` sandbox (and launcher) tests: installed and started by the project's own
`deploy/slurm/start_slurm.sh`. Skips locally when it cannot start; fails in CI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.realcomponents import REPO_ROOT, require_real_component

#: The second cluster of the tests that need settings the shared one must not get (a small
#: MaxArraySize would refuse other tests' arrays): its own state directory and ports.
ARRAYS_CLUSTER = {"NEL_SLURM_DIR": "/var/lib/nel-slurm-arrays", "NEL_SLURM_PORT": "6837"}
#: The cluster with fake GPUs (`Gres=gpu:4` on each node, /dev/null-backed device files):
#: jobs asking `gres: gpu:4` are scheduled there and see CUDA_VISIBLE_DEVICES. Its own state
#: directory and ports, so the shared cluster's config never flips between checkouts.
GPU_CLUSTER = {"NEL_SLURM_DIR": "/var/lib/nel-slurm-gpu", "NEL_SLURM_PORT": "6851",
               "NEL_SLURM_GPUS": "4"}


def start_slurm_cluster(*, accounting: bool = False, separate: dict[str, str] | None = None,
                        max_array_size: int | None = None, cpus: int | None = None) -> str:
    """Start the cluster if needed (idempotent: under a second when it is up; the first call
    installs Debian's slurm packages) and return its SLURM_CONF.

    `accounting` adds MariaDB + slurmdbd so `sacct` answers; switching it on restarts
    slurmctld once (queued and running jobs survive), later starts keep it on.
    `separate` (e.g. ARRAYS_CLUSTER) starts a second cluster beside the shared one, with its
    own `max_array_size` (MaxArraySize) and `cpus` (CPUs its node declares); those two are
    refused for the shared cluster, which other tests use at the same time.
    """
    if separate is None and (max_array_size is not None or cpus is not None):
        raise ValueError("max_array_size/cpus change a cluster other tests share: pass separate=")
    script = REPO_ROOT / "deploy" / "slurm" / "start_slurm.sh"
    env = {**os.environ, **({"NEL_SLURM_ACCOUNTING": "1"} if accounting else {}), **(separate or {})}
    if max_array_size is not None:
        env["NEL_SLURM_MAX_ARRAY_SIZE"] = str(max_array_size)
    if cpus is not None:
        env["NEL_SLURM_CPUS"] = str(cpus)
    try:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                              env=env, timeout=1200)
    except subprocess.TimeoutExpired:
        require_real_component("deploy/slurm/start_slurm.sh did not finish in 20 minutes")
    if proc.returncode != 0:
        require_real_component(f"the SLURM cluster did not start: {proc.stderr.strip()[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("export SLURM_CONF="):
            return line.split("=", 1)[1]
    require_real_component(f"start_slurm.sh printed no SLURM_CONF: {proc.stdout!r}")


def gsm8k_byob_dir(root: Path, n_rows: int, module_name: str, module_text: str) -> Path:
    """`root` with the first `n_rows` GSM8K test problems as `rows.jsonl` (question, bare
    answer) and a BYOB module over them (`module_name`), for SLURM runs small enough to repeat.
    Skips (fails in CI) when the data is not there."""
    data_dir = Path(os.environ.get("NEL_DATA_DIR", REPO_ROOT.parent / "shared" / "datasets"))
    src = data_dir / "gsm8k" / "test.jsonl"
    if not src.exists():
        require_real_component(f"GSM8K rows not found at {src} (set NEL_DATA_DIR)")
    rows = [json.loads(line) for line in src.read_text().splitlines()[:n_rows]]
    (root / "rows.jsonl").write_text("".join(
        json.dumps({"question": r["question"], "answer": r["answer"].split("####")[-1].strip()}) + "\n"
        for r in rows))
    (root / module_name).write_text(module_text)
    return root


def sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A SLURM command (`squeue ...`) against the cluster of `env` (its SLURM_CONF)."""
    return subprocess.run(list(args), capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


def ctrl_c_submitted_run(proc: subprocess.Popen[bytes], log: Path, slurm_env: dict[str, str],
                         job_ids: Callable[[], list[str]],
                         check_queued: Callable[[list[str]], None], *,
                         submit_timeout: float = 180) -> list[str]:
    """Wait until the run `proc` has submitted its merge job (its log says so), take its job
    ids, `check_queued` them, Ctrl-C the run and expect exit 130; returns the ids.

    `proc` must have been started with default signals (tests.support.signals). If anything
    here fails, the run is killed and every job learnt of is cancelled, so none stays queued;
    on success nothing is cancelled here: that the run cancelled them is the test's to check.
    """
    from tests.support.waiting import wait_for

    ids: list[str] = []
    try:
        wait_for(lambda: "merge job" in log.read_text(), timeout=submit_timeout,
                 what="the jobs to be submitted")
        ids += job_ids()
        check_queued(ids)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()
    except BaseException:
        if ids:
            subprocess.run(["scancel", *ids], env={**os.environ, **slurm_env}, check=False,
                           capture_output=True, timeout=60)
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return ids
