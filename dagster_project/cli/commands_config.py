"""`nel config`: the user's persistent defaults (data and model locations, endpoint, ...).

    nel config set data_dir ../shared/datasets
    nel config get data_dir
    nel config show
    nel config unset data_dir

Every later `nel` command, and `dagster dev -m dagster_project.definitions`, reads these as
defaults for the matching `NEL_*` variables; a variable set in the environment wins.
"""

from __future__ import annotations

import argparse
import os
import sys

# Spelled out rather than imported from nel_resources.runtime.user_config: `nel --help` imports
# nothing but argparse (a test keeps the two lists equal).
KEY_NAMES = "data_dir, model_path, model_url, api_key_env, output_dir, dagster_postgres_url, daemon"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `config` with its `set`, `get`, `show`, `unset` and `path` actions."""
    keys = KEY_NAMES
    cfg = sub.add_parser("config", help="show or change your persistent nel defaults",
                         description=f"Persistent defaults for nel and `dagster dev` (keys: {keys}). "
                         "An environment variable that is set wins over the stored value.")
    csub = cfg.add_subparsers(dest="config_command", metavar="ACTION")
    p = csub.add_parser("set", help="store KEY = VALUE")
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE")
    p.set_defaults(func=_cmd_set)
    p = csub.add_parser("get", help="print KEY's stored value (exit 1 when unset)")
    p.add_argument("key", metavar="KEY")
    p.set_defaults(func=_cmd_get)
    p = csub.add_parser("unset", help="remove KEY (exit 1 when unset)")
    p.add_argument("key", metavar="KEY")
    p.set_defaults(func=_cmd_unset)
    p = csub.add_parser("show", help="every key: stored value, environment override, meaning")
    p.set_defaults(func=_cmd_show)
    p = csub.add_parser("path", help="print the config file's path")
    p.set_defaults(func=lambda a: (print(_path()), 0)[1])
    cfg.set_defaults(func=_cmd_show)


def _path() -> str:
    from nel_resources.runtime.user_config import user_config_path

    return str(user_config_path())


def _cmd_set(args: argparse.Namespace) -> int:
    from nel_resources.runtime.user_config import KEYS, set_value

    stored = set_value(args.key, args.value)
    print(f"{args.key} = {stored}  ({_path()})")
    var = KEYS[args.key].env
    if os.environ.get(var, stored) != stored:
        print(f"note: {var} is set in this environment and wins over the stored value", file=sys.stderr)
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    from nel_resources.runtime.user_config import get_value

    value = get_value(args.key)
    if value is None:
        # NeMo Evaluator's wording and status for a key that is not set
        print(f"Error: Key not found: {args.key}", file=sys.stderr)
        return 1
    print(value)
    return 0


def _cmd_unset(args: argparse.Namespace) -> int:
    from nel_resources.runtime.user_config import unset_value

    if not unset_value(args.key):
        print(f"Error: Key not found: {args.key}", file=sys.stderr)
        return 1  # as NeMo Evaluator: unsetting a key that is not set is an error
    print(f"Removed: {args.key}  ({_path()})")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from nel_resources.runtime.user_config import KEYS, load_user_config

    values = load_user_config()
    print(f"# {_path()}")
    for key, spec in KEYS.items():
        stored = values.get(key)
        line = f"{key:<12} {stored if stored is not None else '(unset)'}"
        env = os.environ.get(spec.env)
        # main() applies the file to the environment first; only a different value overrides.
        if env is not None and env != stored:
            line += f"   [{spec.env}={env} wins]"
        print(f"{line}\n{'':<12} {spec.help}")
    return 0
