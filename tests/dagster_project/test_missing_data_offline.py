"""Missing data stays on this machine: an empty data directory, or one that is a file, is
one line saying where the file goes, and not one lookup or connection leaves loopback
unless downloads were asked for (`NEL_ALLOW_DOWNLOADS=1`).

The real `nel eval run` runs behind tests/support/netguard (every non-loopback name lookup
or connection is refused and logged), against a reference server on 127.0.0.1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dagster_project import exit_codes
from tests.support.cli import run_nel
from tests.support.cli_output import error_lines
from tests.support.realcomponents import REPO_ROOT

NETGUARD = REPO_ROOT / "tests" / "support" / "netguard"


def _run(tmp_path: Path, url: str, data_dir: Path, **extra: str):  # type: ignore[no-untyped-def]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"services:\n  m: {{type: api, url: '{url}', model: tiny}}\n"
                   "benchmarks:\n  - {name: gsm8k, max_problems: 3}\n")
    env = {"PYTHONPATH": f"{NETGUARD}{os.pathsep}{REPO_ROOT}",
           "NEL_NETGUARD_LOG": str(tmp_path / "net.log"), "NEL_DATA_DIR": str(data_dir),
           "NEL_CACHE_DIR": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf"),
           "NEL_USER_CONFIG": str(tmp_path / "user.yaml"), **extra}
    return run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "out"), "--no-progress",
                   env=env, unset=[k for k in ("HF_HUB_OFFLINE", "NEL_ALLOW_DOWNLOADS") if k not in env],
                   timeout=180)


def _attempts(tmp_path: Path) -> str:
    log = tmp_path / "net.log"
    return log.read_text() if log.exists() else ""


@pytest.mark.parametrize("kind", ["empty_dir", "a_file"])
def test_missing_data_is_one_line_and_no_network(kind: str, tmp_path: Path, ref_url: str) -> None:
    data = tmp_path / "data"
    if kind == "empty_dir":
        data.mkdir()
    else:
        data.write_text("not a directory\n")
    p = _run(tmp_path, ref_url, data)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == exit_codes.EVAL_FAILED, p.stderr[-3000:]
    (line,) = error_lines(p.stdout, p.stderr)
    if kind == "empty_dir":
        assert f"put the original file at {data / 'gsm8k' / 'test.jsonl'}" in line, line
        assert "NEL_DATA_DIR" in line and "data_dir" in line and "NEL_ALLOW_DOWNLOADS=1" in line, line
    else:
        assert f"the data directory {data}" in line and "is a file" in line, line
    assert _attempts(tmp_path) == "", "nel tried the network:\n" + _attempts(tmp_path)


def test_the_guard_sees_a_download_when_one_is_allowed(tmp_path: Path, ref_url: str) -> None:
    """The check above can fail: allowed, the same run reaches for the hub (refused here)."""
    data = tmp_path / "data"
    data.mkdir()
    p = _run(tmp_path, ref_url, data, NEL_ALLOW_DOWNLOADS="1", HF_HUB_ETAG_TIMEOUT="1",
             HF_HUB_DOWNLOAD_TIMEOUT="1")
    assert p.returncode == exit_codes.EVAL_FAILED, p.stderr[-3000:]
    assert "huggingface.co" in _attempts(tmp_path), _attempts(tmp_path)[:2000]
