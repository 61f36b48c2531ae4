"""nel's pooled SQLite storages (dagster_project/sqlite_storage.py) on real Dagster instances:
the files are Dagster's own (a home written through them reads with Dagster's stock storages
and the other way round, an older nel home keeps its history), a run's many statements reuse
one connection, and neither a forked child nor concurrent threads break the database."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from dagster_project.automation import DATA_VERSION_TAG
from dagster_project.instance_config import (
    instance_yaml,
    open_instance,
    seed_from_template,
    write_instance_yaml,
)
from dagster_project.sqlite_storage import PooledSqliteEventLogStorage, PooledSqliteRunStorage

PARTS = dg.StaticPartitionsDefinition([f"p{i}" for i in range(12)])


@dg.asset(partitions_def=PARTS)
def numbers(context) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partition": context.partition_key},
                                data_version=dg.DataVersion(f"v-{context.partition_key}"))


def _stock_yaml(home: Path) -> str:
    """The same dagster.yaml with Dagster's own SQLite storage classes (as nel wrote it before)."""
    return (instance_yaml(home, {})
            .replace("module: dagster_project.sqlite_storage\n  class: PooledSqliteRunStorage",
                     "module: dagster._core.storage.runs\n  class: SqliteRunStorage")
            .replace("module: dagster_project.sqlite_storage\n  class: PooledSqliteEventLogStorage",
                     "module: dagster._core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NEL_DAGSTER_POSTGRES_URL", raising=False)
    h = tmp_path / "home"
    h.mkdir()
    write_instance_yaml(h, {})
    return h


def _materialize(instance: dg.DagsterInstance, partition: str) -> None:
    assert dg.materialize([numbers], instance=instance, partition_key=partition).success


def _partitions(instance: dg.DagsterInstance) -> dict[str, str]:
    """partition -> data version of every materialization of `numbers`."""
    records = instance.fetch_materializations(numbers.key, limit=100).records
    return {r.partition_key: r.asset_materialization.tags[DATA_VERSION_TAG]  # type: ignore[union-attr]
            for r in records}


def test_nel_home_uses_pooled_storages_and_stays_readable_by_stock_dagster(home: Path, tmp_path: Path) -> None:
    pooled = open_instance(home)
    assert isinstance(pooled.run_storage, PooledSqliteRunStorage)
    assert isinstance(pooled.event_log_storage, PooledSqliteEventLogStorage)
    _materialize(pooled, "p0")

    stock_home = tmp_path / "stock"
    stock_home.mkdir()
    (stock_home / "dagster.yaml").write_text(_stock_yaml(home))
    stock = dg.DagsterInstance.from_config(str(stock_home))
    assert type(stock.event_log_storage).__name__ == "ConsolidatedSqliteEventLogStorage"
    assert _partitions(stock) == {"p0": "v-p0"}
    assert len(stock.get_runs()) == 1
    _materialize(stock, "p1")

    assert _partitions(pooled) == {"p0": "v-p0", "p1": "v-p1"}
    assert len(pooled.get_runs()) == 2


def test_older_nel_home_is_rewritten_and_keeps_its_history(home: Path) -> None:
    (home / "dagster.yaml").write_text(_stock_yaml(home))  # what an older nel wrote
    old = dg.DagsterInstance.from_config(str(home))
    assert type(old.run_storage).__name__ == "SqliteRunStorage"
    _materialize(old, "p0")

    write_instance_yaml(home, {})
    assert "PooledSqliteRunStorage" in (home / "dagster.yaml").read_text()
    new = open_instance(home)
    assert isinstance(new.run_storage, PooledSqliteRunStorage)
    assert _partitions(new) == {"p0": "v-p0"}
    _materialize(new, "p1")
    assert _partitions(new) == {"p0": "v-p0", "p1": "v-p1"}


def test_a_run_reuses_its_connections(home: Path) -> None:
    instance = open_instance(home)
    _materialize(instance, "p0")  # the engines exist now
    connects: list[str] = []
    for storage, name in ((instance.run_storage, "runs"), (instance.event_log_storage, "events")):
        engine = storage._nel_engine.get()  # type: ignore[attr-defined]
        sa.event.listen(engine.pool, "connect", lambda *_a, n=name: connects.append(n))
    before = len(instance.all_logs(instance.get_runs()[0].run_id))
    _materialize(instance, "p1")
    stored = len(instance.all_logs(instance.get_runs()[0].run_id))
    # Dagster's stock storages open a new SQLite connection for each of these statements.
    assert stored >= 10 and before >= 10
    assert len(connects) <= 2, connects


def test_forked_child_gets_its_own_connections(home: Path) -> None:
    instance = open_instance(home)
    _materialize(instance, "p0")
    pid = os.fork()
    if pid == 0:  # the child writes through the same instance object, then leaves at once
        code = 1
        try:
            code = 0 if dg.materialize([numbers], instance=instance, partition_key="p1").success else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _materialize(instance, "p2")  # the parent's pooled connections still work
    assert _partitions(instance) == {"p0": "v-p0", "p1": "v-p1", "p2": "v-p2"}
    with sa.create_engine(f"sqlite:///{home / 'history' / 'event_log.db'}").connect() as conn:
        assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"


def test_threads_store_concurrently(home: Path) -> None:
    instance = open_instance(home)
    errors: list[BaseException] = []

    def report(i: int) -> None:
        try:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                numbers.key, partition=f"p{i}", tags={DATA_VERSION_TAG: f"v-p{i}"}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=report, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _partitions(instance) == {f"p{i}": f"v-p{i}" for i in range(12)}


def test_dagster_migrations_load_once_and_other_folders_as_before(tmp_path: Path) -> None:
    from dagster._core.storage.runs.sqlite import sqlite_run_storage
    from dagster._core.storage.sql import get_alembic_config

    first = ScriptDirectory.from_config(get_alembic_config(sqlite_run_storage.__file__))
    again = ScriptDirectory.from_config(get_alembic_config(sqlite_run_storage.__file__))
    assert first is again
    assert first.as_revision_number("head")

    (tmp_path / "migrations" / "versions").mkdir(parents=True)
    other = Config()
    other.set_main_option("script_location", str(tmp_path / "migrations"))
    assert ScriptDirectory.from_config(other) is not ScriptDirectory.from_config(other)


def _db_mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*.db")}


def test_new_homes_start_from_a_template_of_empty_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEL_DAGSTER_POSTGRES_URL", raising=False)
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    homes = []
    for name in ("one", "two"):
        h = tmp_path / name
        h.mkdir()
        write_instance_yaml(h, {})
        homes.append(h)
    assert seed_from_template(homes[0])
    (template,) = (tmp_path / "cache" / "dagster-instance-template").iterdir()
    assert sorted(_db_mtimes(template)) == ["history/event_log.db", "history/runs.db", "schedules/schedules.db"]
    made = _db_mtimes(template)
    first = open_instance(homes[0])
    _materialize(first, "p0")
    second = open_instance(homes[1])  # seeded from the same template, not a new one
    assert _db_mtimes(template) == made
    assert sorted(_db_mtimes(homes[1])) == sorted(made)
    # Each home is its own instance: its own runs, its own storage id.
    assert _partitions(first) == {"p0": "v-p0"} and _partitions(second) == {}
    assert first.run_storage.get_run_storage_id() != second.run_storage.get_run_storage_id()
    _materialize(second, "p1")
    assert _partitions(second) == {"p1": "v-p1"}
    assert len(first.get_runs()) == 1 and len(second.get_runs()) == 1
    # Stock Dagster reads a seeded home too.
    stock_home = tmp_path / "stock"
    stock_home.mkdir()
    (stock_home / "dagster.yaml").write_text(_stock_yaml(homes[1]))
    assert _partitions(dg.DagsterInstance.from_config(str(stock_home))) == {"p1": "v-p1"}


def test_homes_that_are_not_new_or_not_nels_are_left_to_dagster(home: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "cache"))
    _materialize(open_instance(home), "p0")
    assert not seed_from_template(home)  # its databases exist: its history stays
    assert _partitions(open_instance(home)) == {"p0": "v-p0"}

    own = tmp_path / "own"
    own.mkdir()
    (own / "dagster.yaml").write_text(_stock_yaml(own))  # a user's own file
    assert not seed_from_template(own)
    assert not list(own.rglob("*.db"))

    # An unusable cache (a file where the folder should be): Dagster creates the databases.
    monkeypatch.setenv("NEL_CACHE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    write_instance_yaml(fresh, {})
    assert not seed_from_template(fresh)
    instance = open_instance(fresh)
    _materialize(instance, "p2")
    assert _partitions(instance) == {"p2": "v-p2"}
