"""The SLURM launcher: sbatch scripts from `cluster:`, submission, monitoring, cancellation
and accounting, with the cluster's own commands (sbatch, squeue, scontrol, scancel, sacct).

No Dagster here: `nel eval run` (nel_resources.launchers.slurm_submit) uses `SlurmLauncher` directly,
and `SlurmLauncherResource` (nel_resources.launchers.resource) wraps it for Dagster.

What each `cluster:` key does (NeMo Evaluator 0.3.0's meanings):
- `walltime` -> `--time`; `account` -> `--account`; `sbatch_comment` -> `--comment`;
  `sbatch_extra_flags` (cluster and pool) -> one `#SBATCH --key=value` line each (`true`
  gives a bare `--key`, `false` leaves it out);
- the node pool's `partition`, `nodes`, `ntasks_per_node`, `gres`, `gpus_per_node`;
- `container_env` -> exported in the job before nel starts;
- `auto_resume` / `max_retries` / `max_walltime`: a task that ended for a reason of the
  cluster's (TIMEOUT, PREEMPTED, NODE_FAIL, BOOT_FAIL) is resubmitted, at most `max_retries`
  times, while the tasks' summed elapsed time stays under `max_walltime` (the journal means a
  resumed task sends no request for a sample it already has).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError

# States after which a job (or array task) never runs again.
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
    "OUT_OF_MEMORY", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
# Ends caused by the cluster rather than by the task's own work: `auto_resume` retries these.
INFRA_STATES = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
# SLURM's default MaxArraySize (slurm.conf(5)): array indices run from 0 to one less.
DEFAULT_MAX_ARRAY_SIZE = 1001
_ARRAY_ID_RE = re.compile(r"^(\d+)_(\d+)$")


class SlurmError(NelError):
    """A SLURM command failed (one line: the command and what it said)."""


def walltime_seconds(walltime: str) -> int:
    """`HH:MM:SS` or `D-HH:MM:SS` (also SLURM's `MM:SS`) in seconds."""
    days, _, hms = walltime.rpartition("-")
    parts = [int(p) for p in hms.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


@dataclass(frozen=True)
class SbatchHeader:
    """The `#SBATCH` lines of one job script."""

    job_name: str
    log: str  # `--output` (and `--error`): `%A`/`%a`/`%j` are expanded by SLURM
    walltime: str = "04:00:00"
    partition: str | None = None
    nodes: int = 1
    ntasks_per_node: int = 1
    cpus_per_task: int | None = None
    gres: str | None = None
    gpus_per_node: int | None = None
    account: str | None = None
    comment: str | None = None
    extra_flags: Mapping[str, str | int | float | bool] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The header lines, in a stable order (tests and users diff them)."""
        out = [f"--job-name={self.job_name}", f"--output={self.log}", f"--error={self.log}",
               f"--time={self.walltime}", f"--nodes={self.nodes}",
               f"--ntasks-per-node={self.ntasks_per_node}"]
        opt = [("cpus-per-task", self.cpus_per_task), ("partition", self.partition),
               ("gres", self.gres), ("gpus-per-node", self.gpus_per_node),
               ("account", self.account)]
        out += [f"--{k}={v}" for k, v in opt if v is not None]
        if self.comment:
            out.append(f"--comment={shlex.quote(self.comment)}")
        for key, val in self.extra_flags.items():
            if val is True:
                out.append(f"--{key}")
            elif val is not False and val is not None:
                out.append(f"--{key}={val}")
        return [f"#SBATCH {line}" for line in out]


def render_script(header: SbatchHeader, body: str, *, env: Mapping[str, str] | None = None) -> str:
    """A complete bash job script: header, `set -euo pipefail`, exported `env`, `body`."""
    parts = ["#!/bin/bash", *header.lines(), "", "set -euo pipefail"]
    parts += [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return "\n".join([*parts, "", body.rstrip(), ""])


def render_het_script(headers: Sequence[SbatchHeader], body: str, *,
                      env: Mapping[str, str] | None = None) -> str:
    """A heterogeneous job script: one `#SBATCH` block per component, separated by
    `#SBATCH hetjob` (component K is `srun --het-group=K`); the body runs on component 0."""
    if not headers:
        raise ValueError("a heterogeneous job needs at least one component")
    lines = ["#!/bin/bash"]
    for i, header in enumerate(headers):
        if i:
            lines.append("#SBATCH hetjob")
        lines += header.lines()
    lines += ["", "set -euo pipefail"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return "\n".join([*lines, "", body.rstrip(), ""])


def array_spec(n: int, *, limit: int | None = None) -> str:
    """`--array` value for tasks 0..n-1 (`%limit` caps how many run at once)."""
    if n < 1:
        raise ValueError("an array needs at least one task")
    spec = "0" if n == 1 else f"0-{n - 1}"
    return f"{spec}%{limit}" if limit else spec


@dataclass
class TaskState:
    """One job or array task as SLURM reports it."""

    job_id: str  # `123` or `123_4` for array task 4 of array job 123
    state: str
    exit_code: str = ""  # `code:signal`
    elapsed_s: int | None = None
    reason: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # sacct's fields (MaxRSS, TotalCPU, ...)

    @property
    def done(self) -> bool:
        """The job ended (successfully or not)."""
        return self.state in TERMINAL_STATES

    @property
    def ok(self) -> bool:
        """The job ended with exit status 0."""
        return self.state == "COMPLETED"


class SlurmLauncher:
    """Submit, watch, cancel and account SLURM jobs from this (submit) host.

    Args:
        env: the environment of the SLURM commands (default: this process's; SLURM_CONF
            says which cluster).
        poll_s: seconds between two looks at the queue while waiting.
    """

    def __init__(self, env: Mapping[str, str] | None = None, poll_s: float = 0.5) -> None:
        self.env = dict(os.environ if env is None else env)
        self.poll_s = poll_s

    # -- availability ---------------------------------------------------------------------
    @staticmethod
    def unavailable_reason() -> str | None:
        """Why jobs cannot be submitted from here, or None."""
        missing = [b for b in ("sbatch", "squeue", "scontrol", "scancel") if shutil.which(b) is None]
        if missing:
            return (f"the SLURM client commands are not installed here ({', '.join(missing)} not "
                    "on PATH): run nel on a SLURM submit host, or set `submit: false` to write "
                    "the scripts only")
        return None

    def _run(self, args: Sequence[str], *, check: bool = True, timeout: float = 60) -> str:
        try:
            p = subprocess.run(list(args), capture_output=True, text=True, env=self.env,
                               timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{args[0]} failed: {exc}") from None
        if check and p.returncode != 0:
            said = (p.stderr.strip() or p.stdout.strip()).splitlines()
            raise SlurmError(f"{' '.join(args[:2])} failed (exit {p.returncode}): "
                             f"{said[-1] if said else 'no message'}")
        return p.stdout

    # -- submission -----------------------------------------------------------------------
    def submit(self, script: Path, *, array: str | None = None,
               dependency: str | None = None, args: Sequence[str] = ()) -> str:
        """`sbatch --parsable` one script; returns the job id (the array job's id)."""
        cmd = ["sbatch", "--parsable"]
        if array:
            cmd.append(f"--array={array}")
        if dependency:
            cmd += [f"--dependency={dependency}", "--kill-on-invalid-dep=yes"]
        out = self._run([*cmd, str(script), *args]).strip()
        job_id = out.split(";", 1)[0]  # `id;cluster` on federated clusters
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed no job id: {out!r}")
        return job_id

    def test_only(self, script: Path) -> str | None:
        """`sbatch --test-only`: None if the cluster could run `script` (nothing is
        submitted), else SLURM's reason in one line (`Invalid partition name specified`)."""
        try:
            p = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                               text=True, env=self.env, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"sbatch --test-only failed: {exc}"
        if p.returncode == 0:
            return None
        said = [line for line in (p.stderr + p.stdout).splitlines() if line.strip()]
        last = said[-1] if said else f"exit {p.returncode}"
        return re.sub(r"^(sbatch: error: |allocation failure: )", "", last.strip())

    def max_array_size(self) -> int:
        """The cluster's MaxArraySize: array indices must stay below it, so one array holds at
        most this many tasks (0..MaxArraySize-1)."""
        m = re.search(r"^MaxArraySize\s*=\s*(\d+)", self._run(["scontrol", "show", "config"]), re.M)
        return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE

    # -- monitoring -----------------------------------------------------------------------
    def states(self, job_ids: Iterable[str]) -> dict[str, TaskState]:
        """Every task of the given jobs (array tasks one by one), from `scontrol show job`.

        A pending array's not-yet-started tasks show as one record `123_[0-3]`; they are
        expanded. A job SLURM has forgotten (older than MinJobAge) is left out.
        """
        out: dict[str, TaskState] = {}
        for jid in job_ids:
            text = self._run(["scontrol", "show", "job", "-o", str(jid)], check=False)
            for line in text.splitlines():
                rec = _scontrol_record(line)
                if "JobId" not in rec:
                    continue
                if rec.get("HetJobOffset", "0") != "0":
                    continue  # a heterogeneous job is reported once, as its leader (component 0)
                for task_id in _task_ids(rec):
                    out[task_id] = TaskState(task_id, rec.get("JobState", "UNKNOWN"),
                                             rec.get("ExitCode", ""), _elapsed(rec.get("RunTime")),
                                             rec.get("Reason", ""))
        return out

    def wait(self, job_ids: Sequence[str], *, on_change: Callable[[TaskState], None] | None = None,
             until: Callable[[dict[str, TaskState]], bool] | None = None) -> dict[str, TaskState]:
        """Poll until every task of `job_ids` ended (or `until(states)` is true)."""
        seen: dict[str, str] = {}
        while True:
            states = self.states(job_ids)
            for tid, st in sorted(states.items(), key=lambda kv: _sort_key(kv[0])):
                if seen.get(tid) != st.state:
                    seen[tid] = st.state
                    if on_change is not None:
                        on_change(st)
            if (until is not None and until(states)) or (states and all(s.done for s in states.values())):
                return states
            time.sleep(self.poll_s)

    # -- cancellation ---------------------------------------------------------------------
    def cancel(self, job_ids: Iterable[str]) -> None:
        """`scancel` our own jobs (every task of an array); an ended job is not an error."""
        ids = [str(j) for j in job_ids if j]
        if ids:
            self._run(["scancel", *ids], check=False)

    def wait_gone(self, job_ids: Sequence[str], timeout_s: float = 60) -> bool:
        """After `cancel`: wait until `squeue` lists none of the jobs; False on timeout."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if not self._run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i"], check=False).strip():
                return True
            time.sleep(self.poll_s)
        return False

    # -- accounting -----------------------------------------------------------------------
    def accounting_enabled(self) -> bool:
        """`sacct` answers (the cluster stores accounting in slurmdbd)."""
        p = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True,
                           env=self.env, timeout=60) if shutil.which("sacct") else None
        return p is not None and p.returncode == 0 and "disabled" not in p.stderr + p.stdout

    def accounting(self, job_ids: Iterable[str], *, expect: Iterable[str] = (),
                   timeout_s: float = 60) -> dict[str, TaskState]:
        """Per task: state, exit code and `sacct` figures (Elapsed, TotalCPU, MaxRSS of the
        batch step...), or `scontrol`'s state/exit/run time where accounting is off.

        slurmctld hands ended jobs to slurmdbd asynchronously: with `expect` (task ids known
        to have ended) it polls until sacct lists each of them as ended, for at most
        `timeout_s`; what sacct still lacks then comes from scontrol.
        """
        ids = [str(j) for j in job_ids if j]
        if not ids:
            return {}
        if not self.accounting_enabled():
            return self.states(ids)
        wanted = set(expect)
        end = time.monotonic() + timeout_s
        while True:
            got = self._sacct(ids)
            if all(t in got and got[t].done for t in wanted) or time.monotonic() > end:
                break
            time.sleep(self.poll_s)
        missing = wanted - set(got)
        if missing:
            got.update({t: st for t, st in self.states(ids).items() if t in missing})
        return got

    def _sacct(self, ids: list[str]) -> dict[str, TaskState]:
        fields = ["JobID", "State", "ExitCode", "ElapsedRaw", "Elapsed", "TotalCPU", "MaxRSS",
                  "NodeList", "Start", "End"]
        text = self._run(["sacct", "-n", "-P", "-j", ",".join(ids), f"--format={','.join(fields)}"])
        out: dict[str, TaskState] = {}
        for line in text.splitlines():
            rec = dict(zip(fields, line.split("|"), strict=False))
            jid = rec.get("JobID", "")
            base, _, step = jid.partition(".")
            leader, plus, offset = base.partition("+")
            if plus:  # heterogeneous job `12+0`: reported once, as the leader's id
                if offset != "0":
                    continue
                base = leader
            if not base or (step and step != "batch"):
                continue
            if step == "batch":  # the batch step carries the memory figures
                if base in out and rec.get("MaxRSS"):
                    out[base].extra["MaxRSS"] = rec["MaxRSS"]
                continue
            state = rec.get("State", "").split(" ")[0]
            out[base] = TaskState(base, state, rec.get("ExitCode", ""),
                                  int(rec["ElapsedRaw"]) if rec.get("ElapsedRaw", "").isdigit() else None,
                                  extra={k: rec.get(k, "") for k in ("Elapsed", "TotalCPU", "NodeList",
                                                                     "Start", "End")})
        return out


def _scontrol_record(line: str) -> dict[str, str]:
    """`scontrol show job -o` prints `Key=Value` pairs on one line (values without spaces,
    except a few at the end such as `Command=`, which are not read)."""
    rec: dict[str, str] = {}
    for tok in line.split():
        k, sep, v = tok.partition("=")
        if sep and k not in rec:
            rec[k] = v
    return rec


def _task_ids(rec: Mapping[str, str]) -> list[str]:
    job, task = rec.get("ArrayJobId"), rec.get("ArrayTaskId")
    if not job or task is None:
        return [rec["JobId"]]
    # `0-3`, `1,3-5` or `0-3%2` (the throttle) for pending tasks not started yet.
    ids: list[str] = []
    for part in task.split("%", 1)[0].split(","):
        lo, _, hi = part.partition("-")
        ids += [f"{job}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return ids


def _elapsed(runtime: str | None) -> int | None:
    if not runtime or runtime in ("INVALID", "UNLIMITED"):
        return None
    try:
        return walltime_seconds(runtime)
    except ValueError:
        return None


def _sort_key(task_id: str) -> tuple[int, int]:
    m = _ARRAY_ID_RE.match(task_id)
    return (int(m.group(1)), int(m.group(2))) if m else (int(task_id) if task_id.isdigit() else 0, -1)


def describe(st: TaskState) -> str:
    """One line: `FAILED (exit 1:0, 3 s)`."""
    bits = [f"exit {st.exit_code}"] if st.exit_code and st.done else []
    if st.elapsed_s is not None and st.done:
        bits.append(f"{st.elapsed_s} s")
    if st.reason and st.reason != "None" and not st.done:
        bits.append(st.reason)
    return st.state + (f" ({', '.join(bits)})" if bits else "")


def metadata_of(st: TaskState) -> dict[str, Any]:
    """What a task's end looks like as asset metadata."""
    md: dict[str, Any] = {"slurm_job_id": st.job_id, "slurm_state": st.state,
                          "slurm_exit_code": st.exit_code}
    if st.elapsed_s is not None:
        md["slurm_elapsed_s"] = st.elapsed_s
    md.update({f"sacct_{k.lower()}": v for k, v in st.extra.items() if v})
    return md
