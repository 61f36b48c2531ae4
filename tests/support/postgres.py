"""The real Postgres server for the shared-instance tests: installed and started by the
project's own `deploy/postgres/start_postgres.sh`. Skips locally when it cannot start; fails
in CI. Each test module gets its own fresh database, so runs of other modules (or an older
session) never show in what a test reads."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from tests.support.realcomponents import REPO_ROOT, require_real_component


def start_postgres() -> str:
    """Start the server if needed (idempotent: well under a second when it is up; the first
    call may install Debian's postgresql) and return the URL of its `dagster` database."""
    script = REPO_ROOT / "deploy" / "postgres" / "start_postgres.sh"
    try:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                              env=dict(os.environ), timeout=1200)
    except subprocess.TimeoutExpired:
        require_real_component("deploy/postgres/start_postgres.sh did not finish in 20 minutes")
    if proc.returncode != 0:
        require_real_component(f"Postgres did not start: {proc.stderr.strip()[-2000:]}")
    prefix = "export NEL_DAGSTER_POSTGRES_URL="
    for line in proc.stdout.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):]
    require_real_component(f"start_postgres.sh printed no URL: {proc.stdout!r}")


def _with_db(url: str, db: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


@contextmanager
def fresh_database(prefix: str = "nel_test") -> Iterator[str]:
    """A new, empty database on the started server (its URL); dropped afterwards."""
    import psycopg2  # installed with dagster-postgres

    base = start_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(base.replace("postgresql+psycopg2://", "postgresql://", 1))
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield _with_db(base, name)
        with admin.cursor() as cur:
            # FORCE: a Dagster instance of this process may still hold a pooled connection
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
