"""Partition states of the last launch from an output dir: `<out>/launch/states.json`.

A launcher that runs partitions reports each one's state as it changes (PENDING, RUNNING,
COMPLETED, FAILED; a `submits` launcher that only writes its jobs says WRITTEN or
SUBMITTED); `Launcher.states(out)` reads them back. One file per output dir: a later launch
updates the partitions it launches and keeps the others' last state.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nel_resources.launchers.partitions import PartitionJob

STATES_FILE = Path("launch") / "states.json"


@dataclass(frozen=True)
class PartitionState:
    """How one launched (benchmark, model, shard) partition stands."""

    benchmark: str
    model: str
    shard: int
    state: str  # PENDING, RUNNING, COMPLETED, FAILED (a cluster's own word, e.g. SLURM's TIMEOUT)
    cluster: str = ""  # the cluster.type that launched it
    detail: str = ""  # where it runs, or the one-line error

    @property
    def key(self) -> str:
        """`benchmark/model/shard`."""
        return f"{self.benchmark}/{self.model}/{self.shard}"


class StateFile:
    """The states of one output dir's launches, rewritten atomically on every change (a
    reader never sees half a file). Thread-safe: workers report from their threads."""

    def __init__(self, out: Path, cluster: str) -> None:
        self.path = Path(out) / STATES_FILE
        self.cluster = cluster
        self._lock = threading.Lock()

    def report(self, job: PartitionJob, state: str, detail: str = "") -> None:
        """Record `job`'s new state."""
        st = PartitionState(job.benchmark, job.model, job.shard, state, self.cluster, detail)
        with self._lock:
            doc = _read(self.path)
            doc[st.key] = {**asdict(st), "at": round(time.time(), 3)}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
            tmp.replace(self.path)


def read_states(out: Path) -> list[PartitionState]:
    """The states recorded under `out`, sorted by partition ([] when nothing was launched)."""
    doc = _read(Path(out) / STATES_FILE)
    fields = set(PartitionState.__dataclass_fields__)
    found = [PartitionState(**{k: v for k, v in d.items() if k in fields}) for d in doc.values()]
    return sorted(found, key=lambda s: (s.benchmark, s.model, s.shard))


def _read(path: Path) -> dict[str, dict]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}
