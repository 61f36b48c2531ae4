"""`payload_modifier`: remove, rename and add fields of the request body, and headers.

Removal and renaming apply at every depth (a key inside `extra_body` or a message too);
`params_to_add` merges into the body, mapping into mapping, so adding
`{chat_template_kwargs: {thinking: true}}` keeps the body's other template kwargs.
"""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest

FIELDS = {
    "params_to_remove": FieldSpec("list[str]", None, nullable=True),
    "params_to_add": FieldSpec("dict", None, nullable=True),
    "params_to_rename": FieldSpec("dict[str,str]", None, nullable=True),
    "headers_to_add": FieldSpec("dict[str,str]", None, nullable=True),
    "headers_to_remove": FieldSpec("list[str]", None, nullable=True),
    "headers_to_rename": FieldSpec("dict[str,str]", None, nullable=True),
}
AFFECTS_ANSWERS = True
# Headers the transport owns: changing them would break the HTTP framing.
_HOP_BY_HOP = frozenset({"host", "content-length", "connection", "transfer-encoding"})


def _remove(obj: Any, keys: frozenset[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _remove(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_remove(v, keys) for v in obj]
    return obj


def _rename(obj: Any, names: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {names.get(k, k): _rename(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rename(v, names) for v in obj]
    return obj


def _merge(into: dict[str, Any], add: dict[str, Any]) -> None:
    for k, v in add.items():
        cur = into.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            cur = dict(cur)
            _merge(cur, v)
            into[k] = cur
        else:
            into[k] = v


class PayloadModifier:
    """Edits the body and headers of each request."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.remove = frozenset(cfg["params_to_remove"] or ())
        self.rename = dict(cfg["params_to_rename"] or {})
        self.add = dict(cfg["params_to_add"] or {})
        self.h_add = {k: v for k, v in (cfg["headers_to_add"] or {}).items()
                      if k.lower() not in _HOP_BY_HOP}
        self.h_remove = {h.lower() for h in cfg["headers_to_remove"] or ()}
        self.h_rename = {k.lower(): v for k, v in (cfg["headers_to_rename"] or {}).items()
                         if v.lower() not in _HOP_BY_HOP}

    async def on_request(self, req: ProxyRequest) -> ProxyRequest:
        if self.remove:
            req.body = _remove(req.body, self.remove)
        if self.rename:
            req.body = _rename(req.body, self.rename)
        if self.add:
            _merge(req.body, self.add)
        if self.h_remove or self.h_rename or self.h_add:
            headers = {self.h_rename.get(k.lower(), k): v for k, v in req.headers.items()
                       if k.lower() not in self.h_remove}
            headers.update(self.h_add)
            req.headers = headers
        return req


def build(cfg: dict[str, Any], env: ChainEnv) -> PayloadModifier:
    """The interceptor from its checked config."""
    return PayloadModifier(cfg)
