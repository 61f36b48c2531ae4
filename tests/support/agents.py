"""The OpenClaw CLI installed by `make peers` (deploy/agents/install_openclaw.sh): skip
locally, fail in CI when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.realcomponents import REPO_ROOT, require_real_component

# `make peers` links the install here; NEL_OPENCLAW_BIN names another `openclaw` executable.
DEFAULT_OPENCLAW = REPO_ROOT / ".venv-peers" / "openclaw" / "bin" / "openclaw"


def openclaw_bin() -> Path:
    """Path of the `openclaw` wrapper (runs OpenClaw on its own Node 24)."""
    path = Path(os.environ.get("NEL_OPENCLAW_BIN") or DEFAULT_OPENCLAW)
    if not (path.is_file() and os.access(path, os.X_OK)):
        require_real_component(f"the OpenClaw CLI is not installed at {path} (run `make peers`)")
    return path
