"""The environment a launched shard worker needs from the runner's: what the effective config
refers to by name.

A worker elsewhere (a container, a Ray task on another node or a head started by someone else)
does not inherit the runner's environment, yet the effective config names variables it
expands (`${VAR}`) or reads keys from (`api_key_env`), and the data directory may come from
NEL_DATA_DIR. Only variables set here are passed; values never go on a command line.

No Dagster here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_API_KEY_ENV = re.compile(r"api_key_env:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)")


def referenced_env(config_path: Path) -> dict[str, str]:
    """NEL_DATA_DIR and every `${VAR}` and `api_key_env` of the config that is set here."""
    text = config_path.read_text(encoding="utf-8")
    names = set(_ENV_REF.findall(text)) | set(_API_KEY_ENV.findall(text))
    env = {n: os.environ[n] for n in sorted(names) if n in os.environ}
    if os.environ.get("NEL_DATA_DIR"):
        env["NEL_DATA_DIR"] = os.environ["NEL_DATA_DIR"]
    return env
