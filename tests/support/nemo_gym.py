"""Start the real NeMo Gym (`ng_run`: head server, Ray, the servers of a config) on 127.0.0.1.

Gym would build a uv venv per server; each server's venv is pointed at the one `make peers`
installed (`skip_venv_if_present`), so Gym installs nothing and never reaches the network.
`ng_run` starts one Ray cluster for all its servers, so start it once per test module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nel_resources.processes import ManagedProcess, free_port
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S, wait_for


@dataclass
class GymRun:
    """A running `ng_run`: its head server and the URL of each configured server."""

    proc: ManagedProcess
    root: Path
    head_url: str
    urls: dict[str, str] = field(default_factory=dict)


def gym_site(venv: Path) -> Path:
    """The site-packages of the Gym venv (its built-in servers and their data live there)."""
    return next((venv / "lib").glob("python3*/site-packages"))


def gym_env() -> dict[str, str]:
    """Our environment minus what must not leak into Gym's interpreters."""
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = ""
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


def _get(url: str) -> Any:
    try:
        status, _, body = http_json("GET", url, timeout=5)
    except OSError:
        return None
    return body if status == 200 else None


def _answers(url: str) -> bool:
    try:
        http_json("GET", url + "/", timeout=5)
    except OSError:
        return False
    return True


def start_gym(venv: Path, root: Path, servers: dict[str, dict[str, Any]]) -> GymRun:
    """`ng_run` with `servers` (Gym's config: instance name -> {kind: {server: settings}});
    returns once the head server and every server answer HTTP."""
    for config in servers.values():
        ((kind, inner),) = config.items()
        ((name, _),) = inner.items()
        link = root / "venvs" / kind / name / ".venv"
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(venv)
    head_port = free_port()
    config_file = root / "gym.yaml"
    config_file.write_text(json.dumps({  # JSON is YAML: Gym reads it with OmegaConf
        "head_server": {"host": "127.0.0.1", "port": head_port},
        "default_host": "127.0.0.1",
        "uv_venv_dir": str(root / "venvs"),
        "skip_venv_if_present": True,
        **servers,
    }, indent=1))
    proc = ManagedProcess([str(venv / "bin" / "ng_run"), f"+config_paths=[{config_file}]"],
                          cwd=root, env=gym_env(), log_path=root / "ng_run.log", name="ng_run")
    proc.start()
    run = GymRun(proc, root, f"http://127.0.0.1:{head_port}")
    try:
        instances = wait_for(lambda: _get(f"{run.head_url}/server_instances"),
                             timeout=PROCESS_START_S * 2, alive=proc,
                             what="NeMo Gym's head server (ng_run) to answer")
        run.urls = {str(i["process_name"]): str(i["url"]) for i in instances}
        for name, url in run.urls.items():
            wait_for(lambda u=url: _answers(u), timeout=PROCESS_START_S * 2, alive=proc,
                     what=f"Gym server {name} at {url} to answer")
    except BaseException:
        stop_gym(run)
        raise
    return run


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (Ray's workers leave our process group, not our session)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def stop_gym(run: GymRun) -> None:
    """SIGINT `ng_run` (it stops its servers and its Ray cluster), then kill what is left of
    the session it leads (only processes this run started)."""
    proc = run.proc
    sid = proc.pid
    if proc.is_running():
        os.kill(sid, signal.SIGINT)
        with contextlib.suppress(BaseException):  # what is left is killed below
            wait_for(lambda: not _session_members(sid), timeout=60, what="ng_run to shut down")
    proc.stop()
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
