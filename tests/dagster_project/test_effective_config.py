"""`<out>/nel-config.yaml` keeps references to secrets, never their values, and a Dagster
run started from it (`dagster job execute`) authenticates against a server that needs the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dagster_project.instance_config import write_instance_yaml
from dagster_project.run_output import save_effective_config
from nel_resources.config import load_config
from nel_resources.wire.redact import REDACTED
from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import server_stats

KEY = "sk-test-4f1c9e0b7a2d"
HEADER_SECRET = "literal-header-secret-9d8c"


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "nel.yaml"
    path.write_text(
        "services:\n"
        "  m:\n"
        "    type: api\n"
        f"    url: {url}\n"
        "    model: tiny\n"
        "    api_key: ${NEL_TEST_API_KEY}\n"
        "    headers:\n"
        "      X-Trace: ${NEL_TEST_API_KEY}\n"
        f"      X-Api-Token: {HEADER_SECRET}\n"
        "      X-Team: evals\n"
        "benchmarks:\n"
        "  - name: gsm8k\n"
        "    max_problems: 3\n"
        f"output:\n  dir: {tmp_path / 'out'}\n"
    )
    return path


def test_saved_config_keeps_references_not_values(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("NEL_TEST_API_KEY", KEY)
    cfg = load_config(_config(tmp_path, "http://127.0.0.1:9/v1"))
    assert cfg.services["m"].resolved_api_key() == KEY
    assert cfg.services["m"].resolved_headers()["X-Trace"] == KEY
    out = tmp_path / "out"
    out.mkdir()
    text = save_effective_config(cfg, out).read_text()
    assert KEY not in text and HEADER_SECRET not in text, text
    assert "api_key_env: NEL_TEST_API_KEY" in text, text
    assert "${NEL_TEST_API_KEY}" in text, text
    assert REDACTED in text and "evals" in text, text
    warned = capsys.readouterr().err
    assert "X-Api-Token" in warned and "${VAR}" in warned, warned
    # The saved file loads back into the same secrets.
    again = load_config(out / "nel-config.yaml")
    assert again.services["m"].resolved_api_key() == KEY


def test_dagster_job_execute_on_saved_config_authenticates(
    tmp_path: Path, reference_server, data_dir: Path, monkeypatch
) -> None:
    url = reference_server(require_api_key=KEY)
    monkeypatch.setenv("NEL_TEST_API_KEY", KEY)
    cfg = load_config(_config(tmp_path, url))
    out = tmp_path / "out"
    out.mkdir()
    saved = save_effective_config(cfg, out)
    home = tmp_path / "home"
    home.mkdir()
    write_instance_yaml(home, {})  # nel's instance: Dagster's default makes a database per run
    env = nel_env({"NEL_CONFIG": str(saved), "DAGSTER_HOME": str(home),
                   "NEL_DATA_DIR": str(data_dir), "NEL_TEST_API_KEY": KEY})
    exe = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(exe), "job", "execute", "-m", "dagster_project.definitions", "-j", "evaluate"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = server_stats(url)
    assert stats["total_requests"] >= 3, stats
    assert str(401) not in {str(k) for k in stats["by_status"]}, stats["by_status"]
