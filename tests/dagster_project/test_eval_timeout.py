"""`--timeout` and the per-benchmark `timeout` key reach the model client of `nel eval run`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import run_nel, summary_json

# Far above what the run needs with a 0.5 s timeout, far below the 120 s default (or the
# service's 600 s below) that every hung attempt would cost if the setting were lost.
RUN_LIMIT_S = 90


@pytest.mark.parametrize("how", ["flag", "benchmark-key"])
def test_timeout_reaches_the_client(tmp_path: Path, reference_server, server_stats,
                                    data_dir: Path, how: str) -> None:
    url = reference_server(hang_rate=1.0, fail_attempts=1)  # every first attempt hangs
    out = tmp_path / "out"
    if how == "flag":
        args = ["-b", "gsm8k", "-m", "3", "--model-url", url, "--model-id", "m", "--timeout", "0.5"]
    else:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"services:\n  m:\n    url: {url}\n    model: m\n    timeout: 600\n"
                       "benchmarks:\n  - name: gsm8k\n    max_problems: 3\n    timeout: 0.5\n")
        args = [str(cfg)]
    try:
        p = run_nel("eval", "run", *args, "-o", str(out), "--json", "--no-progress",
                    "-O", "services.m.retry_backoff=0.01", env={"NEL_DATA_DIR": str(data_dir)},
                    timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"nel eval run ({how}) still ran after {RUN_LIMIT_S} s: the 0.5 s timeout "
                    "did not reach the client")
    s = summary_json(p)
    assert s["results"][0]["failed"] == 0 and s["requests_sent"] == 6
    st = server_stats(url)
    assert st["faults"] == {"hang": 3} and st["by_endpoint"]["/v1/chat/completions"] == 6
    rows = pq.read_table(out / "gsm8k" / "shard_results" / "model=m" / "shard=0"
                         / "part-0.parquet").to_pylist()
    assert [r["attempts"] for r in rows] == [2, 2, 2] and not any(r["error"] for r in rows)
