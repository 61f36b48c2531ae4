"""`drop_params`: remove top-level fields from every request body (e.g. `max_tokens` for a
server that rejects it)."""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest

FIELDS = {"params": FieldSpec("list[str]")}
AFFECTS_ANSWERS = True


_ABSENT = object()  # `dict.pop` default: tells a dropped key from an absent one


class DropParams:
    """Pops the named fields from the body."""

    # A request it drops nothing from keeps the agent's bytes (`types.py`).
    reports_changes = ("on_request",)

    def __init__(self, params: list[str]) -> None:
        self.params = tuple(params)
        # Nothing to drop: the chain leaves the hook out instead of calling it per request.
        self.idle_hooks = () if self.params else ("on_request",)

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        if self.edit(req.body, None) is not None:
            req.raw = None  # the agent's bytes no longer say what is sent
        return req

    def edit(self, body: dict[str, Any], session_id: str | None) -> dict[str, Any] | None:
        """The request stage on the body alone (`compiled.py`): the body when a field was
        dropped, None when it is unchanged."""
        changed = None
        for p in self.params:
            if body.pop(p, _ABSENT) is not _ABSENT:
                changed = body
        return changed

    def inline_edit(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`edit` as source lines for a compiled request function (`compiled.py`), and the
        names they use (each starting with `p`): one `pop` per field."""
        names: dict[str, Any] = {f"{p}absent": _ABSENT}
        lines: list[str] = []
        for j, param in enumerate(self.params):
            names[f"{p}k{j}"] = param
            lines += [f"if body.pop({p}k{j}, {p}absent) is not {p}absent:", "    changed = True"]
        return lines, names


def build(cfg: dict[str, Any], env: ChainEnv) -> DropParams:
    """The interceptor from its checked config."""
    return DropParams(cfg["params"])
