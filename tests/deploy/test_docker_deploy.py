"""deploy/docker-compose.yaml and the instance config it runs with, checked offline: Compose
(Debian's docker-compose v1) reads the file with every service and the `sharded` profile, and
Dagster accepts deploy/docker/dagster.yaml with dagster-docker's DockerRunLauncher."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.realcomponents import REPO_ROOT, require_real_component

COMPOSE = REPO_ROOT / "deploy" / "docker-compose.yaml"


def test_compose_file_has_every_service_and_the_sharded_profile(tmp_path: Path) -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        require_real_component("docker-compose is not installed (deploy/install_system_deps.sh)")
    env = {**os.environ, "NEL_WORK": str(tmp_path), "NEL_SHARD_IDX": "2", "NEL_TOTAL_SHARDS": "4",
           "NEL_SERVE_PORT": "19091"}
    proc = subprocess.run([exe, "-f", str(COMPOSE), "--profile", "sharded", "config"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert set(services) == {"postgres", "webserver", "daemon", "serve", "eval", "eval-shard"}
    shard = services["eval-shard"]
    assert shard["environment"]["NEL_SHARD_IDX"] == "2" and shard["environment"]["NEL_TOTAL_SHARDS"] == "4"
    assert "/work/out/shard_2" in shard["command"]
    # `nel serve` (on the host network) listens, and is health-checked, on NEL_SERVE_PORT
    assert services["serve"]["command"][-2:] == ["--port", "19091"]
    assert "127.0.0.1:19091/health" in " ".join(services["serve"]["healthcheck"]["test"])
    assert all(f"{tmp_path}:/work" in " ".join(map(str, services[s]["volumes"]))
               for s in ("webserver", "daemon", "eval", "eval-shard"))
    # only the shard service is behind the profile (a plain `up` does not start it)
    assert {s for s, spec in services.items() if spec.get("profiles")} == {"eval-shard"}
    assert shard["profiles"] == ["sharded"]


def test_instance_config_uses_postgres_and_the_docker_run_launcher(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_docker import DockerRunLauncher

    for name, value in {"NEL_PG_URL": "postgresql+psycopg2://nel:pw@127.0.0.1:5432/dagster",
                        "NEL_IMAGE": "nel:local"}.items():
        monkeypatch.setenv(name, value)
    shutil.copy(REPO_ROOT / "deploy" / "docker" / "dagster.yaml", tmp_path / "dagster.yaml")
    cfg, _ = dagster_instance_config(str(tmp_path))
    assert cfg["run_launcher"]["class"] == "DockerRunLauncher" and "postgres" in cfg["storage"]
    launcher = process_config(DockerRunLauncher.config_type(), cfg["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    assert launcher.value["image"] == "nel:local"
    assert launcher.value["container_kwargs"]["network_mode"] == "host"
