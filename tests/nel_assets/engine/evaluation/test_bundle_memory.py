"""A bundle build's memory does not grow with the number of rows as a table of them would.

`build_model_bundle` over 400,000 stored rows must peak at most 40 MB above what it needs
for 50,000 rows (it held every row's table, a `str` per row of several columns and a dict per
row in the exports: ~270 MB more, ~0.75 KB a row). Measured in a fresh child process per
size, as the growth of its peak RSS (VmHWM, reset after the store is written) over its RSS
before the build. The per-row line files are left out (a no-op writer): they are written a
batch at a time, and writing ~1 GB of JSON here would only slow the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")

_CHILD = r"""
import json, sys
import numpy as np
from nel_resources.storage.arrow import pa
from nel_resources.storage.schema import RESULT_SCHEMA
from nel_resources.storage.store import ResultStore
import nel_assets.engine.nemo.exports as exports
from nel_assets.engine.evaluation.evaluate import build_model_bundle

n, shards, root = int(sys.argv[1]), 8, sys.argv[2]
store = ResultStore(root)
per = n // shards
for s in range(shards):
    rng = np.random.default_rng(s)
    i = np.arange(per)
    pid = s * (per // 8) + i // 8
    def const(v, t):
        return pa.repeat(pa.scalar(v, t), per)
    cols = {f.name: pa.nulls(per, f.type) for f in RESULT_SCHEMA}
    cols.update(run_id=const("r", pa.string()), model_id=const("m", pa.string()),
                shard=const(s, pa.int32()), problem_idx=pa.array(pid), repeat=pa.array((i % 8).astype(np.int32)),
                sample_id=pa.array([f"{p}:{r}" for p, r in zip(pid.tolist(), (i % 8).tolist())]),
                category=pa.array([f"c{p % 7}" for p in pid.tolist()]),
                response=pa.array([f"The answer is {p % 97}. #### {p % 97}" for p in pid.tolist()]),
                reward=pa.array((rng.random(per) < 0.6).astype(np.float64)),
                extracted=pa.array([str(p % 97) for p in pid.tolist()]),
                details=const('{"method": "hash_answer"}', pa.string()), finish_reason=const("stop", pa.string()),
                prompt_tokens=const(120, pa.int64()), completion_tokens=const(40, pa.int64()),
                model_ms=pa.array(rng.gamma(2.0, 400.0, per)), total_ms=pa.array(rng.gamma(2.0, 400.0, per) + 1),
                attempts=const(1, pa.int32()), timestamp=pa.array(1.7e9 + i / 50.0))
    table = pa.table([cols[f.name] for f in RESULT_SCHEMA], schema=RESULT_SCHEMA)
    store.write_shard("b", "m", s, table, {"fingerprint": f"f{s}", "n_failed": 0, "data_version": f"d{s}"})
    del table, cols
exports._write_line_files = lambda *a, **k: None  # (see the module's docstring)

def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) // 1024

import gc; gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
before = status("VmRSS")
bundle, _ = build_model_bundle(None, store, "b", "m")
assert bundle["score"]["n_samples"] == per * shards
print(json.dumps({"growth_mb": status("VmHWM") - before}))
"""


def _growth(n: int, root: Path) -> int:
    import nel_assets  # the child imports the same nel as this test

    repo = str(Path(nel_assets.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(root)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])["growth_mb"]


def test_peak_memory_of_a_bundle_build_is_flat_in_the_rows(tmp_path: Path) -> None:
    small = _growth(50_000, tmp_path / "small")
    large = _growth(400_000, tmp_path / "large")
    print(f"growth: {small} MB at 50,000 rows, {large} MB at 400,000")
    assert large - small <= 40, f"peak grew {small} MB -> {large} MB from 50,000 to 400,000 rows"
