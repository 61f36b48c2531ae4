"""The user's persistent nel settings (`nel config`), read as defaults by every nel process.

`make run` sets the data and model locations in the environment, but the commands a user
types next (`nel validate`, `dagster dev`) run in a fresh shell without them, so they went
to the Hugging Face hub and the UI saw a different graph. The file written by `nel config
set` closes that gap: each key is the default of one environment variable, applied to this
process's environment at start-up. An environment variable that is already set always wins.

The file is `$NEL_USER_CONFIG` if set, else `$XDG_CONFIG_HOME/nel/config.yaml`, else
`~/.config/nel/config.yaml`. It is plain YAML (`key: value`), written atomically.

No Dagster here: the CLI reads it before deciding what to import.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks.errors import NelError

__all__ = [
    "KEYS",
    "UserConfigError",
    "apply_user_config",
    "get_value",
    "load_user_config",
    "set_value",
    "unset_value",
    "user_config_path",
]


class UserConfigError(NelError):
    """A bad key, a bad value or an unreadable user config file (one line, exit 2)."""


@dataclass(frozen=True, slots=True)
class Key:
    """One setting: the environment variable it provides a default for, and what it means."""

    env: str
    help: str
    is_path: bool = False
    choices: tuple[str, ...] = ()  # the values it takes, when they are a fixed few


#: Every key `nel config` accepts. Paths are stored absolute, so the setting means the same
#: thing from whatever directory a later command runs.
KEYS: dict[str, Key] = {
    "data_dir": Key("NEL_DATA_DIR", "folder holding the benchmark data files (<bench>/<file>)", True),
    "model_path": Key("NEL_MODEL_PATH", "GGUF file of the default config's llama.cpp model", True),
    "model_url": Key("NEL_MODEL_URL", "OpenAI-compatible base URL used when `--model-url` is not given"),
    "api_key_env": Key("NEL_API_KEY_ENV", "name of the environment variable holding the API key"),
    "output_dir": Key("NEL_OUTPUT_DIR", "where results and the Dagster instance go", True),
    "dagster_postgres_url": Key("NEL_DAGSTER_POSTGRES_URL",
                                "postgresql:// URL of a shared Dagster instance (default: SQLite per output)"),
    "daemon": Key("NEL_DAEMON", "on: `nel eval run` uses a running `nel daemon`; auto: and starts one "
                                "when none runs; off: never (default: auto at a terminal, else on)",
                  choices=("on", "auto", "off")),
}


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the user config lives (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    explicit = env.get("NEL_USER_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "nel" / "config.yaml"


def _check_key(key: str) -> Key:
    if key in KEYS:
        return KEYS[key]
    close = difflib.get_close_matches(key, list(KEYS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UserConfigError(f"unknown config key {key!r}; {hint}known keys: {', '.join(KEYS)}")


def load_user_config(path: Path | None = None) -> dict[str, str]:
    """The stored settings ({} when there is no file).

    Raises:
        UserConfigError: the file is unreadable, not a mapping, or holds an unknown key.
    """
    import yaml

    p = path or user_config_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UserConfigError(f"cannot read the nel user config {p}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserConfigError(f"{p}: not valid YAML ({str(exc).splitlines()[0]}); fix or delete it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserConfigError(f"{p}: expected `key: value` lines, got {type(data).__name__}; fix or delete it")
    out: dict[str, str] = {}
    for k, v in data.items():
        try:
            _check_key(str(k))
        except UserConfigError as exc:
            raise UserConfigError(f"{p}: {exc}") from None
        if v is not None:
            out[str(k)] = str(v)
    return out


def _write(path: Path, values: Mapping[str, str]) -> None:
    """Write atomically (temp file + rename), so a crash never leaves half a file."""
    import yaml

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".yaml", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("# nel user config: defaults for NEL_* variables (`nel config show`)\n")
            if values:
                yaml.safe_dump(dict(sorted(values.items())), fh, default_flow_style=False)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserConfigError(f"cannot write the nel user config {path}: {exc.strerror or exc}") from None


def _normalise(key: Key, value: str) -> str:
    value = value.strip()
    if not value:
        raise UserConfigError("empty value; use `nel config unset KEY` to remove a setting")
    if key.is_path:
        return str(Path(value).expanduser().resolve())
    if key.choices and value.lower() not in key.choices:
        raise UserConfigError(f"{key.env} takes {', '.join(key.choices)}, not {value!r}")
    return value.lower() if key.choices else value


def set_value(key: str, value: str, path: Path | None = None) -> str:
    """Store `key` (a path is stored absolute); returns the stored value."""
    spec = _check_key(key)
    p = path or user_config_path()
    values = load_user_config(p)
    values[key] = _normalise(spec, value)
    _write(p, values)
    return values[key]


def unset_value(key: str, path: Path | None = None) -> bool:
    """Remove `key`; returns whether it was set."""
    _check_key(key)
    p = path or user_config_path()
    values = load_user_config(p)
    if key not in values:
        return False
    del values[key]
    _write(p, values)
    return True


def get_value(key: str, path: Path | None = None) -> str | None:
    """The stored value of `key`, or None."""
    _check_key(key)
    return load_user_config(path).get(key)


def apply_user_config(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Fill unset `NEL_*` variables from the user config; returns what was applied.

    Variables already set (even to "") are left alone: the environment always wins.
    """
    env = os.environ if environ is None else environ
    applied: dict[str, str] = {}
    for key, value in load_user_config(user_config_path(env)).items():
        var = KEYS[key].env
        if var not in env:
            env[var] = value
            applied[var] = value
    return applied
