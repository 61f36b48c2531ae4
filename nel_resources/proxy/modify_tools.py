"""`modify_tools`: strip or add properties in the JSON schema of every tool's parameters."""

from __future__ import annotations

import copy
from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest

FIELDS = {"strip_properties": FieldSpec("list[str]", None, nullable=True),
          "add_properties": FieldSpec("dict[str,dict]", None, nullable=True)}
AFFECTS_ANSWERS = True


class ModifyTools:
    """Rewrites `tools[*].function.parameters.properties` (and `required`)."""

    # A request without tools keeps the agent's bytes (`types.py`).
    reports_changes = ("on_request",)

    def __init__(self, strip: list[str], add: dict[str, dict[str, Any]]) -> None:
        self.strip = tuple(strip)
        self.add = add
        # Nothing to strip or add: the chain leaves the hook out instead of calling it.
        self.idle_hooks = () if self.strip or self.add else ("on_request",)

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        if self.edit(req.body, None) is not None:
            req.raw = None  # tools to rewrite: the body is encoded again (`types.py`)
        return req

    def edit(self, body: dict[str, Any], session_id: str | None) -> dict[str, Any] | None:
        """The request stage on the body alone (`compiled.py`): the body when it has a
        list of tools (counted as changed, as `on_request` does), else None."""
        tools = body.get("tools")
        if not isinstance(tools, list):
            return None
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            if not isinstance(props, dict):
                continue
            required = params.get("required")
            for name in self.strip:
                props.pop(name, None)
                if isinstance(required, list) and name in required:
                    required.remove(name)
            for name, schema in self.add.items():
                props.setdefault(name, copy.deepcopy(schema))
        return body

    def inline_edit(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`edit` as source lines for a compiled request function (`compiled.py`), and the
        names they use (each starting with `p`): called only for a body with tools."""
        # (A body without tools, the common case, is told apart by `is not None` alone:
        # `isinstance` is a global lookup and a call.)
        return [f"{p}t = body.get('tools')",
                f"if {p}t is not None and ({p}t.__class__ is list or isinstance({p}t, list)):",
                f"    {p}edit(body, session_id)",
                "    changed = True"], {f"{p}edit": self.edit}


def build(cfg: dict[str, Any], env: ChainEnv) -> ModifyTools:
    """The interceptor from its checked config."""
    return ModifyTools(cfg["strip_properties"] or [], cfg["add_properties"] or {})
