"""Which Dagster instance a nel run records into: the embedded SQLite default next to the
results, or one shared Postgres instance that runs from many machines report to.

The shared instance is selected by `NEL_DAGSTER_POSTGRES_URL` (or `nel config set
dagster_postgres_url ...`, which provides that variable's default). The `dagster.yaml` nel
writes names the variable, never its value, so the password does not land on disk and a
`dagster dev` started with the same variable shows the same runs. Results stay in each run's
Parquet store (on a shared path when the runs are on several machines).

No Dagster import at module level: `nel --help` must not pay for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.errors import NelError

__all__ = [
    "POSTGRES_URL_ENV",
    "instance_yaml",
    "open_instance",
    "postgres_url",
    "prepare_template",
    "seed_from_template",
    "use_psycopg2_driver",
    "write_instance_yaml",
]

#: The environment variable selecting the shared Postgres instance.
POSTGRES_URL_ENV = "NEL_DAGSTER_POSTGRES_URL"

#: First line of every dagster.yaml nel writes: only such a file is ever rewritten by nel
#: (a user's own dagster.yaml is left alone).
MARKER = "# Written by nel"

_COMMON = """\
telemetry:
  enabled: false
nux:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""
_COMPUTE_LOGS = """\
compute_logs:
  module: dagster._core.storage.noop_compute_log_manager
  class: NoOpComputeLogManager
"""
# Why no compute-log capture: capturing a step's stdout/stderr spawns a `tail` and a Python
# watcher process per step, and on Ctrl-C that watcher prints its own KeyboardInterrupt
# traceback to the terminal. nel's own output and the run log say what happened.

# One consolidated SQLite event log instead of Dagster's default database per run: a new
# instance is created in ~0.2 s instead of ~0.8 s, and each run pays less to open its log.
# Both storages are Dagster's SQLite ones on a pooled engine (sqlite_storage.py): the same
# files and schema, without a new connection per statement.
_SQLITE = """\
run_storage:
  module: dagster_project.sqlite_storage
  class: PooledSqliteRunStorage
  config:
    base_dir: {home}/history
event_log_storage:
  module: dagster_project.sqlite_storage
  class: PooledSqliteEventLogStorage
  config:
    base_dir: {home}/history
schedule_storage:
  module: dagster._core.storage.schedules
  class: SqliteScheduleStorage
  config:
    base_dir: {home}/schedules
"""

# Runs, event logs (materializations, observations, dynamic partitions) and schedules all go
# to Postgres; the URL is read from the environment by Dagster when the instance opens.
_POSTGRES = f"""\
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL_ENV}
"""


def postgres_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The shared instance's URL as dagster-postgres needs it, or None for the embedded default.

    dagster-postgres speaks psycopg2 only, while SQLAlchemy 2.1 opens a bare `postgresql://`
    URL with psycopg 3 (its SQL then fails); a bare URL is returned with the driver named
    (`postgresql+psycopg2://`), which is also what `start_postgres.sh` prints.

    Raises:
        NelError: the variable is set but is not a postgresql:// URL with a host (one line).
    """
    env = os.environ if environ is None else environ
    url = (env.get(POSTGRES_URL_ENV) or "").strip()
    if not url:
        return None
    parts = urlsplit(url)
    dialect, _, driver = parts.scheme.partition("+")
    if dialect not in ("postgresql", "postgres") or driver not in ("", "psycopg2") or not parts.hostname:
        raise NelError(f"{POSTGRES_URL_ENV} must be a URL like postgresql://user:password@host:5432/db "
                       f"(got scheme {parts.scheme or 'none'!r}); unset it to use the embedded instance")
    return "postgresql+psycopg2://" + url.split("://", 1)[1]


def use_psycopg2_driver() -> str | None:
    """Set the URL variable, for this process, to the form dagster-postgres can open (see
    `postgres_url`), so every instance nel opens here works; returns it (None: not set)."""
    url = postgres_url()
    if url is not None:
        os.environ[POSTGRES_URL_ENV] = url
    return url


def instance_yaml(home: Path, environ: Mapping[str, str] | None = None) -> str:
    """The dagster.yaml for `home`: shared Postgres when selected, else SQLite under `home`."""
    if postgres_url(environ) is not None:
        head = f"{MARKER}: the shared Postgres instance named by ${POSTGRES_URL_ENV}.\n"
        return head + _COMMON + _POSTGRES + _COMPUTE_LOGS
    head = f"{MARKER}: a persistent instance next to the results.\n"
    return head + _COMMON + _SQLITE.format(home=home) + _COMPUTE_LOGS


def write_instance_yaml(home: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Write `home/dagster.yaml` unless it is the user's own file or already what is selected.

    A file nel wrote earlier is rewritten when the selection changed (SQLite -> Postgres or
    back), so setting or unsetting the variable takes effect on the next run.
    """
    if environ is None:
        use_psycopg2_driver()
    path = home / "dagster.yaml"
    want = instance_yaml(home, environ)
    try:
        have = path.read_text()
    except FileNotFoundError:
        have = None
    if have is not None and (have == want or not have.startswith(MARKER)):
        return path
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(want)
    os.replace(tmp, path)
    return path


# Any fixed 64-bit number: the advisory lock every nel process takes while it creates the
# shared instance's tables.
_SCHEMA_LOCK = 0x6E656C5F64616773


def open_instance(home: Path) -> Any:
    """The Dagster instance of `home` (a `dg.DagsterInstance`), with its storage opened.

    On the shared Postgres instance the URL variable is set, for this process, to the form
    dagster-postgres can use (see `postgres_url`). The first processes to open a new shared
    instance at the same time would each create its tables, and the loser would fail with
    "relation already exists": a Postgres advisory lock held while the storage opens makes
    the others wait, then find the tables.

    A finished run's recording still under way in the background (background_recording)
    is waited for first: what this process reads then includes that run.
    """
    import dagster as dg

    from dagster_project.background_recording import wait_for_recording

    wait_for_recording(home)

    url = use_psycopg2_driver()
    if url is None:
        seed_from_template(home)
        instance = dg.DagsterInstance.from_config(str(home))
        instance.get_dynamic_partitions("model")  # opens (creates) its storage
        return instance
    import psycopg2  # installed with dagster-postgres

    conn = psycopg2.connect("postgresql://" + url.split("://", 1)[1])
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
        instance = dg.DagsterInstance.from_config(str(home))
        # Each storage creates its tables when first used.
        instance.get_runs(limit=1)
        instance.get_dynamic_partitions("model")
        instance.schedule_storage.all_instigator_state()  # type: ignore[union-attr]
    finally:
        conn.close()  # ends the session, which releases the lock
    return instance


# A new SQLite instance's three databases, as Dagster creates them (tables, indexes, alembic
# stamp, WAL mode), kept once per Dagster version and storage layout. Creating them costs a
# new home ~0.11 s (195 DDL statements); copying them 0.01 s. Dagster finds the files and
# only checks their revision.
_DATABASES = ("history/runs.db", "history/event_log.db", "schedules/schedules.db")


def _complete(folder: Path) -> bool:
    return all((folder / db).is_file() for db in _DATABASES)


def _template() -> Path | None:
    """The template's folder, made first when missing (concurrent makers race harmlessly: the
    first rename wins); None when it cannot be made."""
    import hashlib
    import shutil
    import tempfile

    import dagster as dg

    from benchmarks.datasets import nel_cache_root

    key = hashlib.sha256(f"{dg.__version__}\0{instance_yaml(Path('/HOME'), {})}".encode()).hexdigest()[:16]
    where = nel_cache_root() / "dagster-instance-template" / key
    if _complete(where):
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".making-", dir=where.parent))
    try:
        write_instance_yaml(tmp, {})
        instance = dg.DagsterInstance.from_config(str(tmp))
        instance.get_dynamic_partitions("model")
        instance.dispose()  # closes every connection: the WAL is folded into each file
        if any(tmp.rglob("*-wal")) or not _complete(tmp):
            return None  # not a clean set of files: do without
        with contextlib.suppress(OSError):  # another process made it first
            os.rename(tmp, where)
        return where if _complete(where) else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def seed_from_template(home: Path) -> bool:
    """Give a new embedded instance (nel's SQLite `dagster.yaml`, no database yet) copies of
    an empty instance's databases; returns whether it did. Anything unusual (a user's own
    `dagster.yaml`, some database already there, an unwritable cache) leaves the home to
    Dagster, which creates the databases itself."""
    try:
        if (home / "dagster.yaml").read_text() != instance_yaml(home, {}):
            return False
        if any((home / db).exists() or (home / f"{db}-wal").exists() for db in _DATABASES):
            return False
        where = _template()
        if where is None:
            return False
        for db in _DATABASES:
            dest = home / db
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
            part.write_bytes((where / db).read_bytes())
            os.replace(part, dest)
        return True
    except Exception:  # only a shortcut: Dagster creates the databases itself then
        return False


def prepare_template() -> None:
    """Make the template of a new instance now if it is missing (the nel daemon does, before
    its first fork, so that no run pays for it)."""
    with contextlib.suppress(Exception):  # the runs do without it then
        _template()
