"""SlurmLauncher: script headers, scontrol parsing, and a real array on the single-node cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.launchers.slurm import (
    SbatchHeader,
    SlurmLauncher,
    _scontrol_record,
    _task_ids,
    array_spec,
    render_het_script,
    render_script,
    walltime_seconds,
)
from tests.support.slurm_cluster import start_slurm_cluster


def test_header_lines_follow_the_cluster_keys() -> None:
    h = SbatchHeader(job_name="nel-eval", log="/o/logs/eval-%A_%a.log", walltime="1-02:00:00",
                     partition="batch", nodes=2, ntasks_per_node=4, gres="gpu:8", account="proj",
                     comment="weekly eval", extra_flags={"exclusive": True, "qos": "high", "x": False})
    assert h.lines() == [
        "#SBATCH --job-name=nel-eval", "#SBATCH --output=/o/logs/eval-%A_%a.log",
        "#SBATCH --error=/o/logs/eval-%A_%a.log", "#SBATCH --time=1-02:00:00", "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4", "#SBATCH --partition=batch", "#SBATCH --gres=gpu:8",
        "#SBATCH --account=proj", "#SBATCH --comment='weekly eval'", "#SBATCH --exclusive",
        "#SBATCH --qos=high"]
    script = render_script(h, "echo hi", env={"HF_HOME": "/data/hf cache"})
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=nel-eval\n")
    assert "export HF_HOME='/data/hf cache'\n" in script and script.endswith("echo hi\n")


def test_array_spec_and_walltime() -> None:
    assert array_spec(1) == "0" and array_spec(16) == "0-15" and array_spec(4, limit=2) == "0-3%2"
    with pytest.raises(ValueError):
        array_spec(0)
    assert walltime_seconds("04:00:00") == 14400 and walltime_seconds("1-00:00:10") == 86410
    assert walltime_seconds("05:30") == 330


def test_pending_array_records_expand_to_tasks() -> None:
    rec = _scontrol_record("JobId=7 ArrayJobId=7 ArrayTaskId=1,3-5%2 JobState=PENDING Reason=None")
    assert _task_ids(rec) == ["7_1", "7_3", "7_4", "7_5"]
    assert _task_ids(_scontrol_record("JobId=9 JobState=RUNNING")) == ["9"]


@pytest.fixture(scope="module")
def launcher() -> SlurmLauncher:
    from nel_resources.launchers.resource import SlurmLauncherResource

    return SlurmLauncherResource(slurm_conf=start_slurm_cluster(), poll_seconds=0.2).launcher()


def test_real_array_states_exit_codes_and_cancel(tmp_path: Path, launcher: SlurmLauncher) -> None:
    script = tmp_path / "t.sbatch"
    script.write_text(render_script(SbatchHeader("nel-test", str(tmp_path / "t-%A_%a.log"),
                                                 walltime="00:05:00"),
                                    'echo "arg=$1"; exit "$SLURM_ARRAY_TASK_ID"'))
    job = launcher.submit(script, array=array_spec(2), args=["hello"])
    seen: list[tuple[str, str]] = []
    states = launcher.wait([job], on_change=lambda st: seen.append((st.job_id, st.state)))
    assert {t: (s.state, s.exit_code) for t, s in states.items()} == {
        f"{job}_0": ("COMPLETED", "0:0"), f"{job}_1": ("FAILED", "1:0")}
    assert (f"{job}_1", "FAILED") in seen
    assert (tmp_path / f"t-{job}_0.log").read_text().strip() == "arg=hello"
    acct = launcher.accounting([job], expect=states)  # sacct once slurmdbd has them, else scontrol
    assert acct[f"{job}_1"].state == "FAILED" and acct[f"{job}_1"].exit_code == "1:0"

    later = tmp_path / "later.sbatch"
    later.write_text(render_script(SbatchHeader("nel-test", str(tmp_path / "later-%j.log"),
                                                extra_flags={"begin": "now+1hour"}), "exit 0"))
    held = launcher.submit(later, array=array_spec(3))
    assert {s.state for s in launcher.states([held]).values()} == {"PENDING"}  # for an hour
    launcher.cancel([held])
    assert launcher.wait_gone([held])


def test_real_heterogeneous_job_is_one_task_and_test_only_names_the_reason(
        tmp_path: Path, launcher: SlurmLauncher) -> None:
    """Component 0 in partition `debug`, component 1 in `het` (start_slurm.sh's second node):
    states and accounting report the job once, under the leader's id."""
    log = str(tmp_path / "h-%j.log")
    headers = [SbatchHeader("nel-het", log, walltime="00:05:00", partition="debug"),
               SbatchHeader("nel-het", log, walltime="00:05:00", partition="het")]
    script = tmp_path / "h.sbatch"
    script.write_text(render_het_script(headers, 'srun --het-group=1 --ntasks=1 bash -c '
                                        '\'echo "comp1 on $SLURMD_NODENAME"\'; exit 3'))
    text = script.read_text()
    assert text.count("#SBATCH hetjob") == 1
    assert text.index("--partition=debug") < text.index("#SBATCH hetjob") < text.index("--partition=het")
    assert launcher.test_only(script) is None
    job = launcher.submit(script)
    states = launcher.wait([job])
    assert list(states) == [job] and states[job].state == "FAILED" and states[job].exit_code == "3:0"
    assert (tmp_path / f"h-{job}.log").read_text().strip().endswith("-het")
    acct = launcher.accounting([job], expect=[job])
    assert acct[job].state == "FAILED" and acct[job].exit_code == "3:0"

    bad = tmp_path / "bad.sbatch"
    bad.write_text(render_het_script([headers[0], SbatchHeader("x", log, partition="no-such")], "true"))
    assert launcher.test_only(bad) == "Invalid partition name specified"


def test_definitions_of_a_slurm_config_carry_the_launcher_resource(tmp_path: Path) -> None:
    from dagster_project.definitions import build_definitions
    from nel_resources.config import load_config
    from nel_resources.launchers.resource import SlurmLauncherResource

    cfg = load_config(data={
        "services": {"m": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
        "benchmarks": [{"name": "gsm8k"}],
        "cluster": {"type": "slurm", "node_pools": {"cpu": {"partition": "debug"}}}})
    defs = build_definitions(cfg, str(tmp_path))
    assert isinstance(defs.resources["slurm_launcher"], SlurmLauncherResource)
