"""The `openclaw` solver inside the benchmark's sandbox, as NeMo Evaluator 0.3.0 runs it.

0.3.0 (`OpenClawSolver._solve_sandbox`) writes a generated `openclaw.json` into the
sample's container, runs `node <openclaw.mjs> agent --agent main --message ... --session-id
... --json --local` there with `sandbox.exec`, and lets PinchBench's grading read the
files the agent left. nel does the same, with the agent's workspace being the sandbox's
workdir (where the benchmark's workspace files are written and where `verify` grades), so
nothing has to be copied back.

Where OpenClaw comes from:

- `docker` (`mounted_layout`): no image with Node and OpenClaw can be pulled here, and a
  ~850 MB image per OpenClaw release would be built on every machine. The host's install
  (`make peers`: its own Node 24 and the OpenClaw package) is bind-mounted read-only into
  the container, with nel's bridge (`openclaw_runtime/bridge.mjs`). Any image with glibc
  works (the benchmark's own). The container keeps `--network none`: the agent reaches the
  capture proxy and the search relay only through Unix sockets in a mounted directory
  (`nel_resources.sandboxes.unix_relay`), which the bridge serves on the container's own
  `127.0.0.1:<port>`, so the URLs in the config are the host's.
- `ecs_fargate` (`image_layout`): 0.3.0's OpenClaw image (`/app/openclaw.mjs`, home
  `/home/node`), or the block's `image`, through the sandbox's exec path.

The home (config, sessions, the agent's SQLite transcript) lives in the sandbox's /tmp and
is removed after the run; the transcript database is copied out first for the trajectory.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.sandboxes.base import Sandbox, VolumeMount

__all__ = ["SandboxLayout", "SandboxRun", "host_install", "image_layout", "mounted_layout",
           "run_in_sandbox"]

_RUNTIME_DIR = Path(__file__).resolve().parent / "openclaw_runtime"
_MOUNT = "/opt/nel-openclaw"
#: Where the Unix sockets of the relay are mounted in a no-network sandbox.
SOCKET_MOUNT = f"{_MOUNT}/uds"
#: The container path of nel's Tavily plugin (mounted when web search is on).
PLUGIN_MOUNT = f"{_MOUNT}/tavily"
_DB = ".openclaw/agents/main/agent/openclaw-agent.sqlite"
_EXEC_LINE = re.compile(r'^exec\s+"([^"]+)"\s+"([^"]+)"')


@dataclass(frozen=True)
class SandboxLayout:
    """Where OpenClaw is inside the sandbox, and what must be mounted for it.

    Attributes:
        node: the Node executable (a container path, or a name on the image's PATH).
        entry: OpenClaw's `openclaw.mjs`.
        home: `$HOME` of a run (its `.openclaw/` is written there).
        bridge: nel's bridge script when the sandbox has no network (None: it has one).
        volumes: host directories the sandbox must mount (read-only).
    """

    node: str
    entry: str
    home: str
    bridge: str | None = None
    volumes: tuple[VolumeMount, ...] = field(default_factory=tuple)


def host_install(openclaw_bin: str) -> tuple[Path, Path]:
    """(Node's install root, the `node_modules` holding `openclaw/`) of a host install.

    `make peers` writes a wrapper whose last line is `exec "<node>" "<openclaw.mjs>"`; an npm
    install links `openclaw` to `openclaw.mjs`, run by the `node` on PATH.

    Raises:
        NelError: one line, when `openclaw_bin` is neither.
    """
    found = shutil.which(openclaw_bin)
    if found is None:
        raise NelError(f"the 'openclaw' solver cannot run here: the OpenClaw CLI "
                       f"`{openclaw_bin}` is not on PATH (install it with `make peers`, or "
                       "give its path in `solver.openclaw_bin`)")
    real = Path(found).resolve()
    node: str | None = None
    entry: Path | None = None
    if real.name == "openclaw.mjs":
        node, entry = shutil.which("node"), real
    else:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in real.read_text(encoding="utf-8")[:4096].splitlines():
                m = _EXEC_LINE.match(line.strip())
                if m:
                    node, entry = m.group(1), Path(m.group(2))
    if not node or entry is None or entry.parent.parent.name != "node_modules":
        raise NelError(f"the 'openclaw' solver cannot mount OpenClaw into the sandbox: "
                       f"`{openclaw_bin}` is neither `make peers`' wrapper nor a link to "
                       "node_modules/openclaw/openclaw.mjs (give one in `solver.openclaw_bin`)")
    node_bin = Path(node).resolve()
    return node_bin.parent.parent, entry.parent.parent


def mounted_layout(openclaw_bin: str, socket_dir: Path, *, plugin_dir: Path | None) -> SandboxLayout:
    """The host's OpenClaw mounted into a no-network container (see the module docstring)."""
    node_root, modules = host_install(openclaw_bin)
    node_rel = Path(shutil.which("node", path=str(node_root / "bin")) or node_root / "bin" / "node")
    vols = [VolumeMount(str(node_root), f"{_MOUNT}/node", True),
            VolumeMount(str(modules), f"{_MOUNT}/node_modules", True),
            VolumeMount(str(_RUNTIME_DIR), f"{_MOUNT}/runtime", True),
            VolumeMount(str(socket_dir), SOCKET_MOUNT, True)]
    if plugin_dir is not None:
        vols.append(VolumeMount(str(plugin_dir), PLUGIN_MOUNT, True))
    return SandboxLayout(node=f"{_MOUNT}/node/{node_rel.relative_to(node_root)}",
                         entry=f"{_MOUNT}/node_modules/openclaw/openclaw.mjs",
                         home="/tmp/nel-openclaw-home", bridge=f"{_MOUNT}/runtime/bridge.mjs",
                         volumes=tuple(vols))


def image_layout() -> SandboxLayout:
    """NeMo Evaluator 0.3.0's OpenClaw image: `node /app/openclaw.mjs`, home `/home/node`."""
    return SandboxLayout(node="node", entry="/app/openclaw.mjs", home="/home/node")


@dataclass
class SandboxRun:
    """One agent run's outcome in a sandbox (`rc` None: it was stopped at its limit)."""

    rc: int | None
    stdout: str
    stderr: str
    latency_ms: float
    #: a host copy of the run's `.openclaw/` (transcript database only), to be removed
    state: Path


async def run_in_sandbox(sandbox: Sandbox, layout: SandboxLayout, cfg: dict[str, Any],
                         argv: list[str], *, ports: list[int], system_prompt: str | None,
                         timeout: float) -> SandboxRun:
    """Write the config, run OpenClaw (`argv` after `openclaw`) in `sandbox`, fetch its
    transcript database, remove its home.

    Args:
        sandbox: the sample's started sandbox; OpenClaw's workspace is its workdir.
        layout: where OpenClaw is in it.
        cfg: the sample's `openclaw.json` (its workspace already the sandbox's workdir).
        argv: OpenClaw's arguments (`agent --agent main ...`).
        ports: host ports on 127.0.0.1 the agent must reach (bridged when no network).
        system_prompt: written to the workspace's `AGENTS.md`, as on the host.
        timeout: seconds before the sandbox ends the run.
    """
    state = Path(tempfile.mkdtemp(prefix="nel-openclaw-state-"))
    with tempfile.TemporaryDirectory(prefix="nel-openclaw-cfg-") as tmp:
        cfg_file = Path(tmp) / "openclaw.json"
        cfg_file.write_text(json.dumps(cfg, indent=2))
        await sandbox.upload(cfg_file, f"{layout.home}/.openclaw/openclaw.json")
        if system_prompt:
            prompt_file = Path(tmp) / "AGENTS.md"
            prompt_file.write_text(system_prompt.rstrip() + "\n")
            await sandbox.upload(prompt_file, "AGENTS.md")
    cmd = [layout.node, layout.entry, *argv]
    if layout.bridge is not None:
        cmd = [layout.node, layout.bridge, SOCKET_MOUNT, ",".join(map(str, ports)), "--", *cmd]
    env = {"HOME": layout.home, "OPENCLAW_NO_AUTO_UPDATE": "1", "NO_COLOR": "1"}
    started = time.perf_counter()
    try:
        res = await sandbox.exec(cmd, timeout_sec=timeout, env=env)
        latency_ms = (time.perf_counter() - started) * 1000.0
        db = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
        for suffix in ("", "-wal"):  # a WAL not yet checkpointed holds the last rows
            with contextlib.suppress(NelError, OSError):
                await sandbox.download(f"{layout.home}/{_DB}{suffix}", Path(f"{db}{suffix}"))
    finally:
        with contextlib.suppress(NelError, OSError):
            await sandbox.exec(["rm", "-rf", layout.home], timeout_sec=30)
    rc = None if res.stopped == "timeout" else res.return_code
    return SandboxRun(rc, res.stdout, res.stderr, latency_ms, state)
