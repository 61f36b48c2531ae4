"""Start the real NeMo Gym (`ng_run`: head server, Ray, the servers of a config) on 127.0.0.1.

Gym would build a uv venv per server; each server's venv is pointed at the one `make peers`
installed (`skip_venv_if_present`), so Gym installs nothing and never reaches the network.
Used by `bench/bench_gym_tools.py` and by the test suite's shared Gym stack
(`tests/support/nemo_gym.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nel_resources.runtime.processes import ManagedProcess, free_port

#: Ceiling on the wait for `ng_run`'s head server and each of its servers (Ray alone takes
#: 50-100 s on a busy machine).
START_S = 360.0


@dataclass
class GymRun:
    """A running `ng_run`: its head server and the URL of each configured server."""

    proc: ManagedProcess
    root: Path
    head_url: str
    urls: dict[str, str] = field(default_factory=dict)


#: The range Gym picks its servers' ports from (see `start_gym`).
GYM_PORTS = (20001, 30000)


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
    """The JSON a GET of `url` answers with 200, else None (not up yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError):
        return None


def _answers(url: str) -> bool:
    """Whether anything answers HTTP at `url` (any status)."""
    try:
        with urllib.request.urlopen(url + "/", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _wait_for(check: Callable[[], Any], *, timeout: float, what: str,
              alive: ManagedProcess | None = None) -> Any:
    """Poll `check` until truthy; fail naming `what` (with `alive`'s log if it exited)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if alive is not None and not alive.is_running():
            raise AssertionError(f"{alive.name} exited while waiting for {what}; log:\n{alive.log_tail(8000)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


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
        # Gym's default range for its servers' ports (10001-20000) is the range Ray's
        # workers take theirs from (10002-19999): a worker starting between Gym's pick and
        # the server's bind took the port once ("address already in use", ng_run exits).
        # This range is clear of both and of the kernel's ephemeral ports (32768 up).
        "port_range_low": GYM_PORTS[0],
        "port_range_high": GYM_PORTS[1],
        "uv_venv_dir": str(root / "venvs"),
        "skip_venv_if_present": True,
        **servers,
    }, indent=1))
    proc = ManagedProcess([str(venv / "bin" / "ng_run"), f"+config_paths=[{config_file}]"],
                          cwd=root, env=gym_env(), log_path=root / "ng_run.log", name="ng_run")
    proc.start()
    run = GymRun(proc, root, f"http://127.0.0.1:{head_port}")
    try:
        instances = _wait_for(lambda: _get(f"{run.head_url}/server_instances"),
                             timeout=START_S, alive=proc,
                             what="NeMo Gym's head server (ng_run) to answer")
        run.urls = {str(i["process_name"]): str(i["url"]) for i in instances}
        outside = {n: u for n, u in run.urls.items()
                   if not GYM_PORTS[0] <= int(u.rstrip("/").rsplit(":", 1)[1]) <= GYM_PORTS[1]}
        assert not outside, f"Gym ignored port_range_low/high: {outside}"
        for name, url in run.urls.items():
            _wait_for(lambda u=url: _answers(u), timeout=START_S, alive=proc,
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
            _wait_for(lambda: not _session_members(sid), timeout=60, what="ng_run to shut down")
    proc.stop()
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
