"""Fixtures shared by this package's tests: one real two-model run per xdist worker (the
report tests), one reference server per module (`ref_url`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

#: The xdist group of every module that uses `two_model_run`, so the run is made once.
TWO_MODEL_RUN_GROUP = "two_model_run"


@pytest.fixture(scope="session")
def two_model_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """`base` and `worse` on the first 90 GSM8K items, evaluated by `nel eval run` against
    reference servers, with ``regression.json`` from `nel compare` beside the output dir.

    Read-only for tests: write reports and copies under your own ``tmp_path``.
    """
    from tests.dagster_project.test_report_cli import make_two_model_run

    return make_two_model_run(tmp_path_factory.mktemp("two-model-run"), data_dir)


@pytest.fixture(scope="module")
def ref_url() -> Iterator[str]:
    """One reference server for the module's tests; its base URL (`.../v1`)."""
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        yield url
    finally:
        proc.stop()
