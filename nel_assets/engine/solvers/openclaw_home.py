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

With `web_search_provider: tavily` the config enables nel's Tavily plugin
(`openclaw_tavily/`) as OpenClaw's `web_search` provider, pointed at the sample's session on
the shard's search relay (`openclaw_search`), which holds the key. A user's own
`openclaw.json` (`config_path`) is the base of each sample's config; nel's settings (the
provider, the model, the workspace, the search plugin) are merged over it.
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
                    max_concurrent: int, idle_timeout_seconds: int,
                    search_url: str | None = None) -> dict[str, Any]:
    """The `openclaw.json` of one sample (see the module docstring)."""
    entry: dict[str, Any] = {"id": model, "name": model, "input": ["text"]}
    if context_window is not None:
        entry["contextWindow"] = context_window
    cfg: dict[str, Any] = {
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
    if search_url is not None:
        from nel_assets.engine.solvers.openclaw_tavily import PLUGIN_DIR

        # NeMo Evaluator 0.3.0's web search settings; the plugin is nel's (see above)
        cfg["tools"]["web"] = {"search": {"provider": "tavily"}}
        cfg["plugins"] = {"load": {"paths": [str(PLUGIN_DIR)]}, "entries": {"tavily": {
            "enabled": True, "config": {"webSearch": {"baseUrl": search_url}}}}}
    return cfg


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` merged in: objects key by key, anything else replaced by `over`'s,
    so nel's required settings win and the user's others stay."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = merged(old, value)
        elif isinstance(old, list) and isinstance(value, list) and key == "paths":
            out[key] = [*old, *(v for v in value if v not in old)]  # plugin paths add up
        else:
            out[key] = value
    return out


def read_user_config(path: str | Path) -> dict[str, Any]:
    """A user's `openclaw.json` (JSON) as a dict.

    Raises:
        ValueError: one line naming the file, when it cannot be read or is not an object.
    """
    file = Path(path).expanduser()
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"config_path {file}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config_path {file}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"config_path {file}: expected a JSON object, got {type(doc).__name__}")
    return doc


def make_home(root: Path, name: str, *, base_url: str, model: str,
              system_prompt: str | None = None, context_window: int | None = None,
              max_concurrent: int = 4, idle_timeout_seconds: int = 600,
              search_url: str | None = None,
              user_config: dict[str, Any] | None = None) -> OpenClawHome:
    """Create `root/name` with the config and an empty workspace.

    A system prompt goes into the workspace's `AGENTS.md`, which OpenClaw puts into the
    system message of every model call (its "project context"): so it reaches the model.
    """
    home = OpenClawHome(root / name, root / name / "workspace")
    home.state.mkdir(parents=True)
    home.workspace.mkdir()
    cfg = openclaw_config(base_url, model, workspace=home.workspace,
                          context_window=context_window, max_concurrent=max_concurrent,
                          idle_timeout_seconds=idle_timeout_seconds, search_url=search_url)
    if user_config:
        cfg = merged(user_config, cfg)
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
