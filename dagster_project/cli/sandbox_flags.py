"""`--sandbox TYPE`, `--sandbox-image IMAGE`, `--sandbox-config FILE.yaml`: a sandbox for
commands that score code outside `nel eval run` (`nel serve`, `nel validate`).

The block has the keys of a config's `sandbox:` (`type`, `image`, `memory`, `timeout`,
`concurrency`, `network`, ...); the file holds one such mapping, and `--sandbox` /
`--sandbox-image` override its `type` / `image`. Only argparse here: the config model is
imported when the flags are used, so `nel --help` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig


def add_sandbox_flags(p: argparse.ArgumentParser) -> None:
    """Add the three sandbox flags to a subcommand."""
    p.add_argument("--sandbox", metavar="TYPE",
                   help="run code benchmarks (humaneval) in a sandbox of this type: local "
                   "(bubblewrap), docker (with --sandbox-image), or another configured type")
    p.add_argument("--sandbox-image", metavar="IMAGE",
                   help="the image of a docker (or apptainer) sandbox; nothing is pulled")
    p.add_argument("--sandbox-config", metavar="FILE.yaml",
                   help="a sandbox block as in a config's `sandbox:` (type, image, memory, "
                   "timeout, concurrency, network, ...); --sandbox/--sandbox-image override it")


def sandbox_config(args: argparse.Namespace) -> SandboxConfig | None:
    """The sandbox block the flags describe, or None when none was given.

    Raises:
        NelError: an unreadable file, or a block that is not a valid sandbox (one line).
    """
    from pydantic import ValidationError

    from benchmarks.errors import NelError
    from nel_resources.config import SandboxConfig

    block: dict[str, Any] = {}
    if args.sandbox_config:
        import yaml

        path = Path(args.sandbox_config).expanduser()
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise NelError(f"--sandbox-config {path}: cannot read it: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        if not isinstance(loaded, dict):
            raise NelError(f"--sandbox-config {path}: expected a mapping of sandbox keys "
                           "(type, image, ...)")
        # A file holding a whole `sandbox:` entry is fine too.
        block = dict(loaded.get("sandbox", loaded)) if isinstance(loaded.get("sandbox"), dict) else loaded
    if args.sandbox:
        block["type"] = args.sandbox
    if args.sandbox_image:
        block["image"] = args.sandbox_image
    if not block:
        return None
    if "type" not in block:
        raise NelError("a sandbox needs a type: add `--sandbox local` (or docker), or `type:` "
                       "to the --sandbox-config file")
    try:
        return SandboxConfig.model_validate(block)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise NelError(f"sandbox{f' `{where}`' if where else ''}: {err['msg']}") from None
