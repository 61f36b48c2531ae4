"""`system_message`: put a configured system message into every chat request.

Strategies (NeMo Evaluator's): `prepend` (default) puts it first, `append` last, `replace`
drops every existing system message and puts it first.
"""

from __future__ import annotations

from typing import Any

from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import ProxyRequest

FIELDS = {"system_message": FieldSpec("str"),
          "strategy": FieldSpec("str", "prepend", choices=("prepend", "append", "replace"))}
AFFECTS_ANSWERS = True


class SystemMessage:
    """Injects the system message."""

    # It changes every body it sees, and says so by dropping `raw` (`types.py`): a chain
    # whose other hooks leave a body alone may still send the caller's bytes unchanged.
    reports_changes = ("on_request",)

    def __init__(self, system_message: str, strategy: str) -> None:
        self.message = system_message
        self.strategy = strategy
        self._prepend = strategy == "prepend"

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        req.raw = None  # the body gets the message below, whatever its shape
        self.edit(req.body, None)
        return req

    def edit(self, body: dict[str, Any], session_id: str | None) -> dict[str, Any]:
        """The request stage on the body alone (`compiled.py`): the body, always changed."""
        messages = body.get("messages")
        # The common case first (a chat body, the default strategy): a list under
        # `messages` means that is the key, whatever else the body holds.
        if self._prepend and messages.__class__ is list:
            body["messages"] = [{"role": "system", "content": self.message}, *messages]
            return body
        key = "input" if "input" in body and "messages" not in body else "messages"
        messages = body.get(key)
        if not isinstance(messages, list):
            if key == "input" and isinstance(messages, str):  # Responses API, plain string
                messages = [{"role": "user", "content": messages}]
            else:
                messages = []
        msg = {"role": "system", "content": self.message}
        if self.strategy == "replace":
            messages = [msg, *(m for m in messages if not (isinstance(m, dict) and m.get("role") == "system"))]
        elif self.strategy == "append":
            messages = [*messages, msg]
        else:
            messages = [msg, *messages]
        body[key] = messages
        return body

    def inline_edit(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`edit` as source lines for a compiled request function (`compiled.py`), and the
        names they use (each starting with `p`): its common case inline, `edit` otherwise."""
        names = {f"{p}edit": self.edit, f"{p}msg": self.message}
        if not self._prepend:
            return [f"body = {p}edit(body, session_id)", "changed = True"], names
        return [f"{p}m = body.get('messages')",
                f"if {p}m.__class__ is list:",
                f"    body['messages'] = [{{'role': 'system', 'content': {p}msg}}, *{p}m]",
                "else:",
                f"    body = {p}edit(body, session_id)",
                "changed = True"], names


def build(cfg: dict[str, Any], env: ChainEnv) -> SystemMessage:
    """The interceptor from its checked config."""
    return SystemMessage(cfg["system_message"], cfg["strategy"])
