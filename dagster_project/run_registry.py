"""The registry of `nel eval run` invocations, read by `nel eval status|stop|logs|jobs|clean|resume`.

One `nel eval run` is one *nel run*: it gets a run id (`YYYYMMDD_HHMMSS_<hash8>`, the shape
NeMo Evaluator uses) and a record, `nel_run.json`, written in two places as NeMo Evaluator
does: the output directory (so `-o DIR` finds the last run there) and a central index
(`$NEL_RUNS_DIR`, else `$XDG_DATA_HOME/nel/dagster-runs`, else `~/.local/share/nel/dagster-runs`)
so `nel eval jobs` lists runs of every output directory. The index is separate from NeMo
Evaluator's own (`.../nel/runs`): its `eval jobs` would try to drive nel's runs through its
executors.

The record says where the run writes (output dir, Dagster home) and which process runs it;
everything else is read from where it already is: the Dagster instance (every Dagster run a
nel run launches carries the tag `nel/run_id`), `<out>/checkpoint.json` (written when a run
ends) and `<out>/logs/nel-run.log`.

No Dagster at import: `nel --help` imports the CLI module that imports this one lazily, and
the Dagster queries import it inside.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_META = "nel_run.json"
"""The record's file name, in the output dir and in the index (NeMo Evaluator's name)."""
RUN_ID_TAG = "nel/run_id"
"""The Dagster run tag naming the nel run a Dagster run belongs to."""
EXECUTOR = "local"
"""nel runs in-process on the local machine (NeMo Evaluator's executor name for that)."""

# Dagster run statuses that mean the run has not ended (as strings: no Dagster import here).
_UNFINISHED = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "MANAGED", "CANCELING"}

_current: RunRecord | None = None


def runs_dir() -> Path:
    """The central index: one `<run_id>/nel_run.json` per run."""
    explicit = os.environ.get("NEL_RUNS_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "nel" / "dagster-runs"


@dataclass
class RunRecord:
    """One nel run (the same keys as NeMo Evaluator's `RunMeta`)."""

    run_id: str
    executor: str
    output_dir: str
    started_at: str
    config_summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        """The output directory."""
        return Path(self.output_dir)

    @property
    def dagster_home(self) -> Path:
        """The Dagster home the run used."""
        return Path(self.details.get("dagster_home") or self.out / ".dagster")

    @property
    def log_path(self) -> Path:
        """The run's log (`<out>/logs/nel-run.log`)."""
        return self.out / "logs" / "nel-run.log"

    def save(self, *, to_output: bool = True) -> None:
        """Write the record to the index and (unless told not to) the output dir, atomically."""
        text = json.dumps(asdict(self), indent=2)
        targets = [runs_dir() / self.run_id / RUN_META]
        if to_output:
            targets.append(self.out / RUN_META)
        for path in targets:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)

    def started(self) -> _dt.datetime | None:
        """`started_at` as an aware datetime (None if unreadable)."""
        try:
            return _dt.datetime.fromisoformat(self.started_at)
        except ValueError:
            return None


def _read(path: Path) -> RunRecord | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def new_run_id(benchmarks: list[str], models: list[str], now: _dt.datetime | None = None) -> str:
    """`YYYYMMDD_HHMMSS_<hash8>`: the time in UTC and a hash of what runs (and the pid, so
    two runs started in the same second get different ids)."""
    now = now or _dt.datetime.now(_dt.UTC)
    digest = hashlib.sha256("|".join([*benchmarks, *models, str(os.getpid())]).encode()).hexdigest()[:8]
    return f"{now.strftime('%Y%m%d_%H%M%S')}_{digest}"


def summary_of(benchmarks: list[str]) -> str:
    """One line naming the benchmarks (as NeMo Evaluator's `config_summary`)."""
    if not benchmarks:
        return ""
    return benchmarks[0] if len(benchmarks) == 1 else f"{benchmarks[0]} (+{len(benchmarks) - 1} more)"


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with
    the pid it identifies a process, so a reused pid is never taken for the run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def register(out: Path, home: Path, benchmarks: list[str], models: list[str]) -> RunRecord:
    """Record the run this process is about to do; its Dagster runs get `dagster_tags()`."""
    global _current
    pid = os.getpid()
    record = RunRecord(
        run_id=new_run_id(benchmarks, models), executor=EXECUTOR, output_dir=str(out),
        started_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        config_summary=summary_of(benchmarks),
        details={"pid": pid, "pid_start": _proc_start(pid), "dagster_home": str(home),
                 "benchmarks": benchmarks, "models": models},
    )
    try:
        record.save()
    except OSError as exc:
        from benchmarks.errors import NelError

        raise NelError(f"cannot record the run in {runs_dir()} or {out}: "
                       f"{exc.strerror or exc} (set NEL_RUNS_DIR to a writable directory)") from None
    _current = record
    from dagster_project import run_log

    run_log.append(run_log.log_path_for(out), f"nel run {record.run_id} (pid {pid}): "
                   f"nel eval status -r {record.run_id}")
    _stop_on_sigterm()
    return record


def dagster_tags() -> dict[str, str]:
    """Tags for the Dagster runs this process launches (empty outside a registered run)."""
    return {RUN_ID_TAG: _current.run_id} if _current is not None else {}


def _stop_on_sigterm() -> None:
    """SIGTERM (what `nel eval stop` sends) ends the run as Ctrl-C does: launched model
    servers are stopped and journals closed. Without this the default action kills the
    interpreter at once, and where the signal is inherited as ignored it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def all_runs() -> list[RunRecord]:
    """Every run in the index, newest first."""
    root = runs_dir()
    if not root.is_dir():
        return []
    runs = [r for p in root.glob(f"*/{RUN_META}") if (r := _read(p)) is not None]
    runs.sort(key=lambda r: r.started_at, reverse=True)
    return runs


def resolve(run_id: str | None = None, output_dir: str | None = None,
            job_id: str | None = None, host: str | None = None) -> RunRecord | None:
    """Find a run by id (the index), output dir (its `nel_run.json`) or SLURM job id (runs
    that record one; nel's local runs never do), in that order, as NeMo Evaluator does."""
    if run_id and (r := _read(runs_dir() / run_id / RUN_META)) is not None:
        return r
    if output_dir and (r := _read(Path(output_dir).expanduser() / RUN_META)) is not None:
        return r
    if job_id:
        for r in all_runs():
            d = r.details
            if (d.get("job_id") == job_id or job_id in d.get("job_ids", [])) and (
                    not host or d.get("hostname") == host):
                return r
    return None


def remove(run_id: str) -> bool:
    """Drop a run from the index (its output directory and Dagster home are left alone)."""
    import shutil

    path = runs_dir() / run_id
    if not path.is_dir():
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def is_running(record: RunRecord) -> bool:
    """Whether the process that runs `record` is still alive (the same process, not a reuse
    of its pid)."""
    pid = record.details.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    start = _proc_start(pid)
    if start is None:  # no /proc (not Linux) or it just ended
        return _alive_without_proc(pid)
    if start != record.details.get("pid_start"):
        return False
    # A zombie (ended, not yet reaped by its parent) has not been running since it ended.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _alive_without_proc(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def finished(exit_status: int, failed: int) -> None:
    """Note in this process's record how its run ended (called once `run_eval` is done)."""
    if _current is None:
        return
    d = _current.details
    d["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    d["status"] = "failed" if failed else "completed"
    d["exit_status"] = exit_status
    own = _read(_current.out / RUN_META)
    try:
        _current.save(to_output=own is None or own.run_id == _current.run_id)
    except OSError as exc:
        # The results and checkpoint.json already say how the run ended; a full or read-only
        # disk must not turn that into a traceback. `nel eval status` falls back on them.
        print(f"warning: cannot record how run {_current.run_id} ended in {runs_dir()} or "
              f"{_current.out}: {exc.strerror or exc}", file=sys.stderr)


def checkpoint_of(record: RunRecord) -> dict[str, Any] | None:
    """`<out>/checkpoint.json` if this run wrote it (a later run there rewrites it)."""
    try:
        doc = json.loads((record.out / "checkpoint.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not record.details.get("finished_at"):
        return None
    try:
        ours = _dt.datetime.fromisoformat(record.details["finished_at"])
        theirs = _dt.datetime.fromisoformat(doc.get("finished_at", ""))
    except (TypeError, ValueError):
        return None
    # written just before the record's finish; a later run's checkpoint is later
    return doc if abs((ours - theirs).total_seconds()) <= 2 else None


def state_of(record: RunRecord) -> str:
    """`running`, `stopped` (by `nel eval stop`), `completed`, `failed` (the run ended and
    recorded failures, see checkpoint.json) or `interrupted` (it ended without finishing:
    killed, Ctrl-C, a crash; `nel eval resume` continues it)."""
    if is_running(record):
        return "running"
    if record.details.get("stopped_at"):
        return "stopped"
    return str(record.details.get("status") or "interrupted")


def mark_stopped(record: RunRecord) -> None:
    """Note in the record that `nel eval stop` ended the run."""
    record.details["stopped_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    # The output dir's copy may already describe a newer run there: only update our own.
    own = _read(record.out / RUN_META)
    record.save(to_output=own is not None and own.run_id == record.run_id)


# --- the Dagster instance's side -------------------------------------------------------

def _open_instance(record: RunRecord) -> Any | None:
    import warnings

    import dagster as dg

    for cat in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=cat)
    if not (record.dagster_home / "dagster.yaml").exists():
        return None
    from dagster_project.instance_config import use_psycopg2_driver

    use_psycopg2_driver()  # a shared Postgres instance named by a bare postgresql:// URL
    return dg.DagsterInstance.from_config(str(record.dagster_home))


def dagster_runs(record: RunRecord) -> list[Any]:
    """The Dagster runs (`DagsterRun`) of this nel run, oldest first."""
    import dagster as dg

    instance = _open_instance(record)
    if instance is None:
        return []
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_ID_TAG: record.run_id}))
    return list(reversed(runs))


def cancel_unfinished(record: RunRecord, message: str) -> int:
    """Mark this run's Dagster runs that never ended (their process is gone) as canceled,
    so the UI does not show them as running forever; returns how many."""
    instance = _open_instance(record)
    if instance is None:
        return 0
    import dagster as dg

    n = 0
    for run in instance.get_runs(filters=dg.RunsFilter(tags={RUN_ID_TAG: record.run_id})):
        if run.status.value in _UNFINISHED:
            instance.report_run_canceled(run, message=message)
            n += 1
    return n


def event_lines(record: RunRecord, shard: int | None = None) -> Iterator[str]:
    """The Dagster event log of this run's Dagster runs, one line per event (optionally only
    the runs of one shard partition)."""
    instance = _open_instance(record)
    if instance is None:
        return
    for run in dagster_runs(record):
        if shard is not None and run.tags.get("dagster/partition/shard") != str(shard):
            continue
        part = run.tags.get("dagster/partition", "")
        for entry in instance.all_logs(run.run_id):
            when = _dt.datetime.fromtimestamp(entry.timestamp, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
            kind = (entry.dagster_event.event_type_value if entry.dagster_event
                    else logging.getLevelName(entry.level))
            step = f" {entry.step_key}" if entry.step_key else ""
            text = " ".join((entry.user_message or "").split())
            yield f"{when} {run.run_id[:8]} {run.job_name}[{part}] {kind}{step}: {text}"
