"""Output locations that cannot be used: an output path that is a file, a Dagster home that
is a file, a read-only output directory, a full Dagster home (before and during a run).
Each is one `error:` line with no traceback, exit 2 when nothing ran (4 mid-run), and
nothing already stored is lost. Real mounts (tests run as root: only a read-only mount or a
full file system stops root), a real reference server and real data."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from dagster_project import exit_codes
from tests.support.cli import run_nel, started_nel, summary_json
from tests.support.cli_output import error_lines
from tests.support.mounts import fill, read_only_view, tmpfs
from tests.support.waiting import wait_while_running


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _journaled(journal_dir: Path) -> bool:
    """True once the shard's journal holds at least one sample."""
    return journal_dir.exists() and any(f.stat().st_size for f in journal_dir.glob("*.jsonl"))


def _chat_requests(stats: dict) -> int:
    return stats["by_endpoint"].get("/v1/chat/completions", 0)


def test_an_output_path_or_dagster_home_that_is_a_file(
        tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server()
    env = {"NEL_DATA_DIR": str(data_dir)}
    a_file = tmp_path / "results.txt"
    a_file.write_text("keep me\n")
    base = ["eval", "run", "-b", "gsm8k", "-m", "2", "--model-url", url, "--no-progress"]

    p = run_nel(*base, "-o", str(a_file), env=env)
    assert p.returncode == exit_codes.USAGE
    (line,) = error_lines(p.stdout, p.stderr)
    assert f"the output directory {a_file} is a file" in line
    assert a_file.read_text() == "keep me\n"

    p = run_nel(*base, "-o", str(tmp_path / "out"), "-O", f"output.dagster_home={a_file}", env=env)
    assert p.returncode == exit_codes.USAGE
    (line,) = error_lines(p.stdout, p.stderr)
    assert f"the Dagster home {a_file} is a file" in line
    assert a_file.read_text() == "keep me\n"
    assert server_stats(url)["total_requests"] == 0


def test_a_read_only_output_directory(tmp_path: Path, reference_server, server_stats, data_dir: Path) -> None:
    url = reference_server()
    env = {"NEL_DATA_DIR": str(data_dir)}
    out = tmp_path / "out"
    args = ["eval", "run", "-b", "gsm8k", "-m", "3", "--model-url", url, "--no-progress", "--json"]
    summary_json(run_nel(*args, "-o", str(out), env=env))
    before = _tree_digest(out)
    sent = server_stats(url)["total_requests"]
    with read_only_view(out, tmp_path / "ro") as ro:
        for extra in ([], ["-n", "2"]):  # up to date, and stale (it would have to write)
            p = run_nel(*args, *extra, "-o", str(ro), env=env)
            assert p.returncode == exit_codes.USAGE, p.stderr
            (line,) = error_lines(p.stdout, p.stderr)
            assert f"{ro}" in line and "Read-only file system" in line
    assert _tree_digest(out) == before
    assert server_stats(url)["total_requests"] == sent


def test_a_full_dagster_home_before_the_run(tmp_path: Path, reference_server, server_stats,
                                            data_dir: Path) -> None:
    url = reference_server()
    out = tmp_path / "out"
    with tmpfs(tmp_path / "home", "300k") as home:
        fill(home)
        p = run_nel("eval", "run", "-b", "gsm8k", "-m", "3", "--model-url", url, "--no-progress",
                    "-o", str(out), "-O", f"output.dagster_home={home / 'dagster'}",
                    env={"NEL_DATA_DIR": str(data_dir)})
    assert p.returncode == exit_codes.USAGE, p.stderr
    (line,) = error_lines(p.stdout, p.stderr)
    assert f"cannot use the Dagster home {home / 'dagster'}" in line and "No space left on device" in line
    assert server_stats(url)["total_requests"] == 0


def test_a_dagster_home_filling_up_mid_run(tmp_path: Path, reference_server, server_stats,
                                           data_dir: Path) -> None:
    """The home fills while the first benchmark's samples are being answered: the run ends
    as failed, one line per pair, and every answered sample is on disk (a rerun with room
    asks only for the others)."""
    # One answer a second: the home must fill while gsm8k still runs, a window of about 5 s
    # after the first journaled sample (time for `fill` even on a busy machine).
    url = reference_server(delay_ms=1000)
    out = tmp_path / "out"
    n = 6
    args = ["eval", "run", "-b", "gsm8k", "-m", str(n), "--model-url", url, "--no-progress", "--json",
            "--max-concurrent", "1", "-o", str(out)]
    env = {"NEL_DATA_DIR": str(data_dir)}
    journal = out / "gsm8k" / "_journal" / "model=default" / "shard=0"
    with tmpfs(tmp_path / "home", "2m") as home, started_nel(
            *args, "-b", "mmlu", "-O", f"output.dagster_home={home / 'dagster'}", out_dir=tmp_path,
            env=env) as (proc, stdout, stderr):
        wait_while_running(lambda: _journaled(journal), proc=proc, what="a journaled sample", log=stderr)
        fill(home)
        rc = proc.wait(timeout=300)
    assert rc == exit_codes.EVAL_FAILED, stderr.read_text()
    errors = error_lines(stdout.read_text(), stderr.read_text())
    assert [ln.split(":")[1].strip() for ln in errors] == ["gsm8k/default", "mmlu/default"], errors
    assert all(f"the Dagster instance at {home / 'dagster'} failed" in ln for ln in errors)
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["status"] == "failed" and len(ck["failed_benchmarks"]) == 2

    # nothing answered is lost: committed rows plus journaled rows
    part = out / "gsm8k" / "shard_results" / "model=default" / "shard=0" / "part-0.parquet"
    on_disk = {r["sample_id"] for r in pq.read_table(part).to_pylist()} if part.exists() else set()
    for f in journal.glob("*.jsonl") if journal.exists() else []:
        on_disk |= {json.loads(x)["sample_id"] for x in f.read_bytes().splitlines() if x.endswith(b"}")}
    assert on_disk, "no answered sample is on disk"
    answered = _chat_requests(server_stats(url))
    p = run_nel(*args, "-O", f"output.dagster_home={tmp_path / 'home2'}", env=env)
    s = summary_json(p)
    assert s["results"][0]["n_items"] == n
    assert _chat_requests(server_stats(url)) - answered == n - len(on_disk)
