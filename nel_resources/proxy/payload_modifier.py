"""`payload_modifier`: remove, rename and add fields of the request body, and headers.

Removal and renaming apply at every depth (a key inside `extra_body` or a message too);
`params_to_add` merges into the body, mapping into mapping, so adding
`{chat_template_kwargs: {thinking: true}}` keeps the body's other template kwargs.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson

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


def _remove(obj: Any, keys: frozenset[str]) -> None:
    """Drop `keys` from every mapping under `obj`, in place.

    In place and only into containers: rebuilding every dict and visiting every string
    was a tenth of a request's client-side cost at high concurrency.
    """
    if isinstance(obj, dict):
        if not keys.isdisjoint(obj):
            for k in keys.intersection(obj):
                del obj[k]
        for v in obj.values():
            if isinstance(v, dict | list):
                _remove(v, keys)
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, dict | list):
                _remove(v, keys)


def _rename(obj: Any, names: dict[str, str], keys: frozenset[str]) -> Any:
    """`obj` with keys renamed at every depth; a mapping without such a key keeps its
    identity and order, one with such a key is rebuilt in its original order."""
    if isinstance(obj, dict):
        if not keys.isdisjoint(obj):
            obj = {names.get(k, k): v for k, v in obj.items()}
        for k, v in obj.items():
            if isinstance(v, dict | list):
                obj[k] = _rename(v, names, keys)
        return obj
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, dict | list):
                obj[i] = _rename(v, names, keys)
    return obj


def _merge(into: dict[str, Any], add: dict[str, Any]) -> None:
    for k, v in add.items():
        cur = into.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            cur = dict(cur)
            _merge(cur, v)
            into[k] = cur
        else:
            # A copy of a container: later stages edit bodies in place and must not
            # change the configured value for the next request.
            into[k] = copy.deepcopy(v) if isinstance(v, dict | list) else v


class PayloadModifier:
    """Edits the body and headers of each request."""

    # A body it edits loses the agent's bytes; headers are sent apart (`types.py`).
    reports_changes = ("on_request",)

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.remove = frozenset(cfg["params_to_remove"] or ())
        self.rename = dict(cfg["params_to_rename"] or {})
        self.rename_keys = frozenset(self.rename)
        needles = [orjson.dumps(k) + b":" for k in sorted(self.remove | self.rename_keys)]
        # One regex search (C) instead of a generator over the needles per request; a
        # single needle is a plain substring test, cheaper still than the regex.
        self._needles = re.compile(b"|".join(map(re.escape, needles))) if needles else None
        self._needle = needles[0] if len(needles) == 1 else None  # a substring test
        self.add = dict(cfg["params_to_add"] or {})
        self.h_add = {k: v for k, v in (cfg["headers_to_add"] or {}).items()
                      if k.lower() not in _HOP_BY_HOP}
        self.h_remove = {h.lower() for h in cfg["headers_to_remove"] or ()}
        self.h_rename = {k.lower(): v for k, v in (cfg["headers_to_rename"] or {}).items()
                         if v.lower() not in _HOP_BY_HOP}
        self._edits_headers = bool(self.h_add or self.h_remove or self.h_rename)
        # A config that changes nothing: the chain leaves the hook out instead of calling it.
        busy = self._needles is not None or self.add or self._edits_headers
        self.idle_hooks = () if busy else ("on_request",)

    def _mentions(self, body: dict[str, Any]) -> tuple[bool, bytes | None]:
        """Whether any key to remove or rename occurs in the body at any depth, and the
        body's encoding that told (None when it has none).

        One C-speed serialisation and substring search instead of a Python walk: a key
        can occur only where its JSON-encoded name followed by `:` does (a string value
        that quotes it costs a needless walk, never a missed key).
        """
        try:
            data = orjson.dumps(body)
        except TypeError:  # a value an earlier stage put in that JSON cannot hold: walk
            return True, None
        if self._needle is not None:
            return data.find(self._needle) >= 0, data  # (`in` costs twice `find` here)
        assert self._needles is not None
        return self._needles.search(data) is not None, data

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        if self._needles is not None:
            found, data = self._mentions(req.body)
            if found:
                req.raw = None  # a key to remove or rename is there: the body changes
                if self.remove:
                    _remove(req.body, self.remove)
                if self.rename:
                    req.body = _rename(req.body, self.rename, self.rename_keys)
            elif req.raw is None and not self.add:
                # The bytes just made encode the body as it goes on: the endpoint sends
                # them instead of encoding it again (`types.py`).
                req.raw = data
        if self.add:
            _merge(req.body, self.add)
            req.raw = None
        if self._edits_headers:
            req.headers = self.edit_headers(req.headers)
        return req

    def edit(self, body: dict[str, Any], session_id: str | None) -> dict[str, Any] | None:
        """The request stage on the body alone (`compiled.py`): the body (possibly a new
        dict) when a key was found or params were added, None when it is unchanged.
        Headers do not depend on the body: `edit_headers` runs once, when compiled."""
        changed = None
        if self._needles is not None and self._mentions(body)[0]:
            changed = body  # as `on_request`: found means changed, even if a walk finds none
            if self.remove:
                _remove(body, self.remove)
            if self.rename:
                changed = body = _rename(body, self.rename, self.rename_keys)
        if self.add:
            _merge(body, self.add)
            changed = body
        return changed

    def inline_edit(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`edit` as source lines for a compiled request function (`compiled.py`), and the
        names they use (each starting with `p`): with nothing to add, the search inline
        and `edit` called only when it finds a key (it searches again: same body, same
        answer); with params to add, `edit` on every body. Without a hit, the bytes the
        search made encode the body as it goes on (`encoded`: sent unless a later hook
        changes it, as `on_request` leaves them in `raw`)."""
        call = [f"out = {p}edit(body, session_id)", "if out is not None:",
                "    body = out", "    changed = True"]
        names: dict[str, Any] = {f"{p}edit": self.edit, f"{p}dumps": orjson.dumps}
        if self._needles is None and not self.add:
            return [], names  # headers only: worked out when compiled, nothing per body
        if self.add or self._needles is None:
            return call, names
        if self._needle is not None:
            names[f"{p}needle"] = self._needle
            search = f"{p}hit = {p}d.find({p}needle) >= 0"
        else:
            names[f"{p}needles"] = self._needles
            search = f"{p}hit = {p}needles.search({p}d) is not None"
        return ["try:", f"    {p}d = {p}dumps(body)", f"    {search}",
                "except TypeError:",  # as `_mentions`: a body JSON cannot hold is walked
                f"    {p}hit = True",
                f"if {p}hit:", *("    " + ln for ln in call),
                "else:", f"    encoded = {p}d"], names

    def edit_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with the configured removals, renames and additions (a new dict)."""
        out = {self.h_rename.get(k.lower(), k): v for k, v in headers.items()
               if k.lower() not in self.h_remove}
        out.update(self.h_add)
        return out


def build(cfg: dict[str, Any], env: ChainEnv) -> PayloadModifier:
    """The interceptor from its checked config."""
    return PayloadModifier(cfg)
