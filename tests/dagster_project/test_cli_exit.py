"""The `nel` process's exit: no collection of the whole heap at shutdown (issue 32), with the
exit status, printed output, written files, Dagster's records and `atexit` handlers as before.

Each test runs the real CLI module as the process's `__main__` (what `nel` and `python -m`
do) under a small launcher that registers an `atexit` handler before nel starts: handlers run
last-registered first, so it runs after every handler nel registered, at the moment the
interpreter would start its final collection, and reports what it sees there.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT

# Reports on stderr, as the last atexit handler: how many objects are exempt from the
# interpreter's final collection (gc.freeze), and whether an atexit handler registered before
# nel's still runs (it is this one). Then runs nel as `python -m dagster_project.cli.main`.
_LAUNCHER = """
import atexit, gc, runpy, sys
def _report():
    sys.stderr.write(f"\\nEXIT-PROBE frozen={gc.get_freeze_count()}\\n")
    sys.stderr.flush()
atexit.register(_report)
sys.argv = ["nel", *sys.argv[1:]]
runpy.run_module("dagster_project.cli.main", run_name="__main__", alter_sys=True)
"""


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """`nel ARGS` under the launcher; returns the process and the frozen-object count."""
    p = subprocess.run([sys.executable, "-c", _LAUNCHER, *args], capture_output=True, text=True,
                       env=nel_env(env), cwd=REPO_ROOT, timeout=300)
    probes = [ln for ln in p.stderr.splitlines() if ln.startswith("EXIT-PROBE ")]
    assert len(probes) == 1, f"the atexit handler did not run once:\n{p.stderr[-3000:]}"
    return p, int(probes[0].split("frozen=")[1])


def test_eval_run_exits_without_a_final_collection_and_keeps_its_outputs(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    n = 60
    url = reference_server(default_content="Step by step.\n#### 42")
    out = tmp_path / "out"
    p, frozen = _run("eval", "run", "--bench", "gsm8k", "-m", str(n), "--model-url", url,
                     "--model-id", "m", "-o", str(out), "--json", "--no-progress",
                     env={"NEL_DATA_DIR": str(data_dir), "NEL_DAEMON": "off"})
    assert p.returncode == 0, p.stderr[-3000:]
    # The whole heap was exempt when the interpreter's shutdown began: tens of thousands of
    # objects after a run (Dagster's and the rows'), none on a plain interpreter.
    assert frozen > 10_000
    # stdout flushed whole: the summary is complete JSON
    s = json.loads(p.stdout)
    assert s["requests_sent"] == n and s["shards_run"] == 1
    assert server_stats(url)["by_endpoint"].get("/v1/chat/completions") == n
    # the files are complete: the Parquet shard and every export line
    exp = Path(s["results"][0]["exports"])
    for name in ("results.jsonl", "trajectories.jsonl"):
        lines = (exp / name).read_text().splitlines()
        assert len(lines) == n and all(json.loads(x)["problem_idx"] >= 0 for x in lines)
    assert json.loads((exp / "runtime_stats.json").read_text())["total_steps"] == n
    # Dagster's records are on disk (the instance's run storage, read by a new connection):
    # the shard's run and the bundle's, both successful.
    with sqlite3.connect(out / ".dagster" / "history" / "runs.db") as con:
        statuses = [r[0] for r in con.execute("SELECT status FROM runs")]
    assert len(statuses) >= 2 and set(statuses) == {"SUCCESS"}


def test_a_refused_command_keeps_its_exit_status_and_message(tmp_path: Path) -> None:
    p, frozen = _run("eval", "run", "--bench", "no_such_benchmark", "--model-url",
                     "http://127.0.0.1:9/v1", "--model-id", "m", "-o", str(tmp_path / "out"),
                     env={"NEL_DAEMON": "off"})
    assert p.returncode == 2
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no_such_benchmark" in errors[0]
    assert "Traceback" not in p.stderr
    assert frozen > 0
