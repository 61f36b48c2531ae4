"""A fresh OpenClaw home per sample: its config, its workspace, the command and environment.

OpenClaw reads `~/.openclaw/openclaw.json` and keeps its state (sessions, transcripts) under
`~/.openclaw/`, so each sample gets a home directory of its own: no sample sees another's
session, and nothing of the user's own OpenClaw setup is read or changed.

The config names one OpenAI-compatible provider, `nel`, whose base URL is the sample's
session on nel's capture proxy (`.../s/<sample id>/v1`): every model call the agent makes
passes the service's interceptor chain and is recorded. It carries no API key: OpenClaw's
local-endpoint path needs none, and the proxy adds the service's key on the way out, so the
agent (and the shell commands it runs) never holds it. For the same reason the agent gets
a small allowlisted environment, not nel's.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROVIDER", "OpenClawHome", "agent_command", "agent_env", "make_home"]

#: The provider name nel's generated config gives the model under test.
PROVIDER = "nel"
# Seconds OpenClaw's own run limit exceeds nel's (see `agent_command`).
_OWN_LIMIT_MARGIN = 30
# What of nel's environment an agent run keeps (no keys, no proxies, no user config).
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL",
             "TERM")


@dataclass(frozen=True)
class OpenClawHome:
    """One sample's OpenClaw directories.

    Attributes:
        home: `$HOME` of the run (holds `.openclaw/`).
        workspace: the agent's working directory (its file and shell tools act here).
        state: `.openclaw/` (config, SQLite state, session transcripts).
    """

    home: Path
    workspace: Path

    @property
    def state(self) -> Path:
        return self.home / ".openclaw"


def openclaw_config(base_url: str, model: str, *, workspace: Path, context_window: int | None,
                    max_concurrent: int, idle_timeout_seconds: int) -> dict[str, Any]:
    """The `openclaw.json` of one sample (see the module docstring)."""
    entry: dict[str, Any] = {"id": model, "name": model, "input": ["text"]}
    if context_window is not None:
        entry["contextWindow"] = context_window
    return {
        "models": {"mode": "merge", "providers": {PROVIDER: {
            "baseUrl": base_url, "api": "openai-completions", "models": [entry],
            "timeoutSeconds": idle_timeout_seconds}}},
        "agents": {"defaults": {
            "model": {"primary": f"{PROVIDER}/{model}"}, "workspace": str(workspace),
            # No first-run interview: the agent starts on the task.
            "skipBootstrap": True, "maxConcurrent": max_concurrent}},
        # The agent's file tools may leave the workspace, as NeMo Evaluator sets it.
        "tools": {"fs": {"workspaceOnly": False}},
    }


def make_home(root: Path, name: str, *, base_url: str, model: str,
              system_prompt: str | None = None, context_window: int | None = None,
              max_concurrent: int = 4, idle_timeout_seconds: int = 600) -> OpenClawHome:
    """Create `root/name` with the config and an empty workspace.

    A system prompt goes into the workspace's `AGENTS.md`, which OpenClaw puts into the
    system message of every model call (its "project context"): so it reaches the model.
    """
    home = OpenClawHome(root / name, root / name / "workspace")
    home.state.mkdir(parents=True)
    home.workspace.mkdir()
    cfg = openclaw_config(base_url, model, workspace=home.workspace,
                          context_window=context_window, max_concurrent=max_concurrent,
                          idle_timeout_seconds=idle_timeout_seconds)
    (home.state / "openclaw.json").write_text(json.dumps(cfg, indent=2))
    if system_prompt:
        (home.workspace / "AGENTS.md").write_text(system_prompt.rstrip() + "\n")
    return home


def agent_command(binary: str, message: str, session_id: str, *, thinking: str | None,
                  timeout: float) -> list[str]:
    """`openclaw agent` for one embedded (`--local`) turn with a JSON result on stdout.

    OpenClaw's own turn limit is nel's plus a margin, so it is always nel that ends a run
    that overstays (category `timeout`), never OpenClaw's default of 600 s or a race
    between the two.
    """
    limit = math.ceil(timeout) + _OWN_LIMIT_MARGIN
    cmd = [binary, "agent", "--agent", "main", "--message", message, "--session-id", session_id,
           "--json", "--local", "--timeout", str(limit)]
    if thinking:
        cmd += ["--thinking", thinking]
    return cmd


def agent_env(home: OpenClawHome) -> dict[str, str]:
    """The agent's environment: the allowlisted variables, its own HOME, no auto-update."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
    env.update(HOME=str(home.home), OPENCLAW_NO_AUTO_UPDATE="1", NO_COLOR="1")
    return env
