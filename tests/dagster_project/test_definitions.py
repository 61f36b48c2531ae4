"""The Definitions load from the embedded default and from a config; asset keys snapshot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nel_assets.factory import build_defs
from nel_resources.config import load_config
from nel_resources.specs import resolve
from tests.support.realcomponents import REPO_ROOT

CONFIG = """\
services:
  base: {url: "http://127.0.0.1:9/v1", model: base}
  cand: {url: "http://127.0.0.1:9/v1", model: cand}
benchmarks:
  - name: gsm8k
    shards: 2
  - name: mmlu
comparison:
  baseline: base
  max_drop: 0.02
"""


def test_asset_keys_snapshot(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    p = tmp_path / "c.yaml"
    p.write_text(CONFIG)
    defs = build_defs(resolve(load_config(p)), str(tmp_path / "out"))
    graph = defs.resolve_asset_graph()
    keys = sorted(k.to_user_string() for k in graph.get_all_asset_keys())
    assert keys == [
        "comparison",
        "gsm8k/bundle", "gsm8k/dataset", "gsm8k/report", "gsm8k/shard_inputs", "gsm8k/shard_results",
        "mmlu/bundle", "mmlu/dataset", "mmlu/report", "mmlu/shard_inputs", "mmlu/shard_results",
    ]
    checks = {c.name for c in graph.asset_check_keys}
    assert "gate" in checks


def test_dagster_definitions_validate_on_the_default(data_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NEL_DATA_DIR": str(data_dir)}
    env.pop("NEL_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m",
                        "dagster_project.definitions"], capture_output=True, text=True, env=env,
                       cwd=REPO_ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Validation successful" in p.stdout + p.stderr


NETGUARD = REPO_ROOT / "tests" / "support" / "netguard"
PRINT_CODE_VERSION = ("import dagster as dg, dagster_project.definitions as d; "
                      "print(d.defs.resolve_asset_graph().get(dg.AssetKey(['gsm8k', 'shard_results'])).code_version)")


def _offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A fresh user's environment behind the network guard: no NEL_* variables, no hub
    cache, HF_HUB_OFFLINE unset, every non-loopback lookup or connection refused and logged."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEL_", "HF_", "DAGSTER_")) and k != "XDG_CONFIG_HOME"}
    env.update({"PYTHONPATH": f"{NETGUARD}{os.pathsep}{REPO_ROOT}", "HF_HOME": str(tmp_path / "hf"),
                "NEL_USER_CONFIG": str(tmp_path / "user.yaml"), "NEL_NETGUARD_LOG": str(tmp_path / "net.log"),
                "NEL_OUTPUT_DIR": str(tmp_path / "out"), **extra})
    return env


def _network_attempts(tmp_path: Path) -> str:
    log = tmp_path / "net.log"
    return log.read_text() if log.exists() else ""


def test_loading_definitions_never_touches_the_network(tmp_path: Path) -> None:
    # No data anywhere: the graph still loads (gsm8k fingerprinted as unloaded), and not one
    # lookup or connection is attempted (it used to retry the Hugging Face hub for ~23 s).
    p = subprocess.run([sys.executable, "-c", PRINT_CODE_VERSION], capture_output=True, text=True,
                       env=_offline_env(tmp_path), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _network_attempts(tmp_path) == "", "loading the definitions tried the network:\n" + _network_attempts(tmp_path)


def test_dagster_definitions_validate_offline_uses_nel_config(tmp_path: Path, data_dir: Path,
                                                               monkeypatch) -> None:
    # The data location recorded with `nel config set` (as `make run` does) reaches a plain
    # `dagster` command with no NEL_* variable: same fingerprint as with NEL_DATA_DIR set.
    env = _offline_env(tmp_path)
    from tests.support.cli import run_nel

    p = run_nel("config", "set", "data_dir", str(data_dir), env={"NEL_USER_CONFIG": env["NEL_USER_CONFIG"]})
    assert p.returncode == 0, p.stderr
    v = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m",
                        "dagster_project.definitions"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert v.returncode == 0 and "Validation successful" in v.stdout + v.stderr, v.stdout + v.stderr
    cv = subprocess.run([sys.executable, "-c", PRINT_CODE_VERSION], capture_output=True, text=True,
                        env=env, cwd=tmp_path, timeout=300)
    assert cv.returncode == 0, cv.stderr
    assert _network_attempts(tmp_path) == "", _network_attempts(tmp_path)

    from dagster_project.config_loading import load_definitions_config
    from nel_assets.factory import bench_code_version

    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    cfg, _ = load_definitions_config(None)
    assert cv.stdout.strip().splitlines()[-1] == bench_code_version(resolve(cfg).benchmarks[0])
