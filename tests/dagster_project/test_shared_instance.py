"""One shared Dagster instance on a real Postgres server: two `nel eval run` processes, each
with its own output dir (as two machines would have), record into the same instance at the
same time; its APIs list both processes' runs and every partition's materialization, and
DuckDB reads both Parquet stores in one query. A rerun stays stale-only on the shared
instance."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
import yaml

from dagster_project.instance_config import (
    POSTGRES_URL_ENV,
    instance_yaml,
    postgres_url,
    write_instance_yaml,
)
from tests.support.cli import nel_env, run_nel, summary_json
from tests.support.postgres import fresh_database
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import reset_server_stats, server_stats

N_PROBLEMS, N_SHARDS = 8, 2


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with fresh_database("nel_shared") as url:
        yield url


def _config(tmp: Path, name: str, url: str) -> Path:
    cfg = {
        "services": {name: {"type": "api", "url": url, "model": name, "temperature": 0.0, "max_tokens": 16}},
        "benchmarks": [{"name": "gsm8k", "max_problems": N_PROBLEMS, "shards": N_SHARDS}],
        "output": {"dir": str(tmp / f"out-{name}")},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _start(cfg: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", "eval", "run", str(cfg),
                             "--json", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=nel_env(env), cwd=REPO_ROOT, start_new_session=True)


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    return summary_json(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


@pytest.mark.slow
def test_two_processes_share_one_postgres_instance(
        tmp_path: Path, pg_url: str, reference_server, data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = reference_server()
    env = {"NEL_DATA_DIR": str(data_dir), POSTGRES_URL_ENV: pg_url}
    cfgs = {m: _config(tmp_path, m, url) for m in ("model-a", "model-b")}

    # Both at once, as two machines would: the first to open the instance creates its schema.
    # The second names the database with a bare postgresql:// URL (nel adds the driver).
    bare = {**env, POSTGRES_URL_ENV: pg_url.replace("postgresql+psycopg2://", "postgresql://", 1)}
    procs = {m: _start(c, env if m == "model-a" else bare) for m, c in cfgs.items()}
    summaries = {m: _finish(p) for m, p in procs.items()}
    for m, s in summaries.items():
        assert s["shards_run"] == N_SHARDS, (m, s)
        home = tmp_path / f"out-{m}" / ".dagster"
        assert "postgres_url" in (home / "dagster.yaml").read_text()
        assert pg_url not in (home / "dagster.yaml").read_text()  # the URL (a password) stays off disk
        assert not (home / "history").exists()  # nothing went to a local SQLite instance

    # What a `dagster dev` on the shared instance sees: open it as the UI would.
    monkeypatch.setenv(POSTGRES_URL_ENV, pg_url)
    ui_home = tmp_path / "ui-home"
    ui_home.mkdir()
    write_instance_yaml(ui_home)
    with dg.DagsterInstance.from_config(str(ui_home)) as instance:
        assert set(instance.get_dynamic_partitions("model")) == {"model-a", "model-b"}
        want = {f"{m}|{s}" for m in ("model-a", "model-b") for s in range(N_SHARDS)}
        shard_key = dg.AssetKey(["gsm8k", "shard_results"])
        parts = instance.get_materialized_partitions(shard_key)
        assert {str(p) for p in parts} == want
        bundle_parts = instance.get_materialized_partitions(dg.AssetKey(["gsm8k", "bundle"]))
        assert {str(p) for p in bundle_parts} == {"model-a", "model-b"}
        runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
        run_parts = {r.tags.get("dagster/partition") for r in runs}
        assert want <= run_parts, run_parts
        # each materialization names the store it was written to: both output dirs show
        records = instance.fetch_materializations(shard_key, limit=100).records
        paths = {str(r.asset_materialization.metadata.get("path").value)
                 for r in records if r.asset_materialization and "path" in r.asset_materialization.metadata}
        assert any("out-model-a" in p for p in paths) and any("out-model-b" in p for p in paths), paths

    # The results stay in each run's Parquet store; DuckDB reads both in place.
    globs = [str(tmp_path / f"out-{m}" / "gsm8k" / "shard_results" / "**" / "*.parquet") for m in cfgs]
    rows = duckdb.sql(f"SELECT model, count(*) FROM read_parquet({globs!r}, hive_partitioning=true) "
                      "GROUP BY model ORDER BY model").fetchall()
    assert rows == [("model-a", N_PROBLEMS), ("model-b", N_PROBLEMS)]

    # Unchanged rerun on the shared instance: nothing stale, no request sent.
    reset_server_stats(url)
    again = summary_json(run_nel("eval", "run", str(cfgs["model-a"]), "--json", "--no-progress", env=env))
    assert again["shards_run"] == 0
    assert server_stats(url)["total_requests"] == 0


def test_instance_selection(tmp_path: Path) -> None:
    """SQLite next to the results by default; Postgres when the variable is set (a file nel
    wrote is rewritten when the choice changes, a user's own dagster.yaml never is); a URL
    that is not postgresql:// is one clear error."""
    from benchmarks.errors import NelError

    home = tmp_path / "home"
    home.mkdir()
    y = write_instance_yaml(home, {})
    assert f"base_dir: {home}/history" in y.read_text()
    write_instance_yaml(home, {POSTGRES_URL_ENV: "postgresql://u:secret@127.0.0.1:5432/d"})
    text = y.read_text()
    assert "env: NEL_DAGSTER_POSTGRES_URL" in text and "secret" not in text
    assert "SqliteRunStorage" not in text
    write_instance_yaml(home, {})
    assert y.read_text() == instance_yaml(home, {})
    y.write_text("telemetry:\n  enabled: false\n")  # the user's own file
    write_instance_yaml(home, {POSTGRES_URL_ENV: "postgresql://u:p@127.0.0.1/d"})
    assert y.read_text() == "telemetry:\n  enabled: false\n"
    # dagster-postgres needs psycopg2 named: SQLAlchemy 2.1 would pick psycopg 3 for a bare URL
    assert postgres_url({POSTGRES_URL_ENV: "postgresql://u:p@h:5/d"}) == "postgresql+psycopg2://u:p@h:5/d"
    with pytest.raises(NelError, match="NEL_DAGSTER_POSTGRES_URL must be a URL like postgresql://"):
        write_instance_yaml(home, {POSTGRES_URL_ENV: "mysql://u:p@h/d"})


def test_a_bad_url_is_one_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "model-a", "http://127.0.0.1:9/v1")
    proc = run_nel("eval", "run", str(cfg), "--no-progress", env={POSTGRES_URL_ENV: "sqlite:///x.db"})
    assert proc.returncode == 2, proc.stderr
    assert "NEL_DAGSTER_POSTGRES_URL must be a URL like postgresql://" in proc.stderr
    assert "Traceback" not in proc.stderr
