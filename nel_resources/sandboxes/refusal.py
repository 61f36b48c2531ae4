"""`Refusal`: why a sandbox block cannot run, as each sandbox type reports it.

A type's module may define `refusal(cfg) -> Refusal | None` next to its `build` and
`preflight`: the config checks (nel_resources.checks) call it, before any request, for
every block a benchmark uses, and name `key` in the one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nel_resources.config import SandboxConfig


@dataclass(frozen=True)
class Refusal:
    """Why a block cannot run: `key` to name, and whether nel lacks the feature (`unbuilt`,
    then `instead` says what to do) or this machine lacks what it needs (`why` says what;
    `needs` names the external resource when only the run needs it, so a dry run lists the
    check instead: nel_resources.checks.deferred)."""

    key: str
    why: str
    instead: str = ""
    unbuilt: bool = False
    needs: str | None = None


def image_template_refusal(cfg: SandboxConfig) -> Refusal | None:
    """Sandbox types that run one image for every problem refuse `image_template`."""
    if cfg.image_template:
        return Refusal("image_template", f"an image per problem (`image_template`) in "
                       f"{cfg.type} sandboxes", "give one `image`", True)
    return None
