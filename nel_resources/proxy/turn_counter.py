"""`turn_counter`: count turns per session, tell the model its budget, stop at the limit.

A session is the request's `session_id` (nel's sample id, or an agent's session), else a
hash of its first non-system message. Past `max_turns` a request is refused before it
reaches the model. The reminder follows NeMo Evaluator's triggers: `threshold` (at 80% and
95% of the budget) or `periodic` (every `interval` turns), as a system message or appended
to the last user message (`position`).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import deque
from typing import Any

from nel_resources.proxy.env import ChainEnv, proxy_logger
from nel_resources.proxy.fields import FieldSpec
from nel_resources.proxy.types import InterceptorError, ProxyRequest

FIELDS = {
    "every": FieldSpec("int", 1, minimum=1),
    "max_turns": FieldSpec("int", None, minimum=1, nullable=True),
    "position": FieldSpec("str", "system_message", choices=("system_message", "user_message")),
    "trigger": FieldSpec("str", "threshold", choices=("threshold", "periodic")),
    "interval": FieldSpec("int", 1, minimum=1),
}
AFFECTS_ANSWERS = True
# Sessions kept at most: an agent harness with endless sessions must not grow memory.
_MAX_SESSIONS = 100_000


def _session_of(body: dict[str, Any]) -> str:
    """A session without an id: a hash of the body's first non-system message."""
    for m in body.get("messages") or ():
        if isinstance(m, dict) and m.get("role") != "system":
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if content:
                return hashlib.sha256(str(content).encode()).hexdigest()[:12]
    return "unknown"


class TurnCounter:
    """Counts turns and enforces the budget."""

    # Only a turn notice changes the request; it drops the agent's bytes (`types.py`).
    reports_changes = ("on_request",)

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.every = cfg["every"]
        self.max_turns: int | None = cfg["max_turns"]
        self.position = cfg["position"]
        self.trigger = cfg["trigger"]
        self.interval = cfg["interval"]
        # Counts in a plain dict (a new key costs half an OrderedDict's), and the sessions
        # in the order they came, for dropping the oldest: `next(iter(dict))` after many
        # deletions from the front of a dict walks every deleted slot, so each new session
        # would cost O(sessions); a deque's popleft is O(1).
        self.turns: dict[str, int] = {}
        self._order: deque[str] = deque()
        self.refused = 0
        self.log = proxy_logger()
        # The first turn that can get a reminder: the turns before it skip `_notice`.
        mt = self.max_turns
        self._notice_from = (self.interval if self.trigger == "periodic"
                             else math.ceil(0.8 * mt - 1e-9) if mt is not None else 0)
        # The first turn that is refused or may get a reminder (`_budget`): none without
        # a budget. The turns before it only count.
        self._act_from: float = math.inf if mt is None else min(mt + 1, self._notice_from)

    def _notice(self, n: int) -> str | None:
        assert self.max_turns is not None
        left = self.max_turns - n
        if self.trigger == "periodic":
            return None if n % self.interval else f"Reminder: {left} turn(s) left to finish the task."
        ratio = n / self.max_turns
        if ratio >= 0.95:
            return f"Turn {n} of {self.max_turns}: {left} turn(s) left. Give your final answer now."
        if ratio >= 0.8:
            return f"Turn {n} of {self.max_turns}: {left} turn(s) left. Start wrapping up."
        return None

    def on_request(self, req: ProxyRequest) -> ProxyRequest:
        if self.edit(req.body, req.ctx.session_id) is not None:
            req.raw = None  # a turn notice went into the body
        return req

    def edit(self, body: dict[str, Any], session_id: str | None) -> dict[str, Any] | None:
        """The request stage on the body alone (`compiled.py`): counts the turn, raises
        InterceptorError past the budget; the body when a notice went into it, else None.
        (`inline_edit` is this, as source for a compiled chain: keep the two in step.)"""
        key = session_id or _session_of(body)
        turns = self.turns
        # No await between read and write: the count is exact under concurrency.
        n = turns.get(key, 0) + 1
        # n == 1 exactly when the session is new (a stored count is at least 1).
        if n == 1:
            if len(turns) >= _MAX_SESSIONS:
                del turns[self._order.popleft()]
            self._order.append(key)
        turns[key] = n
        if (n == 1 or n % self.every == 0) and self.log.isEnabledFor(logging.DEBUG):
            self._log_turn(key, n)
        return None if n < self._act_from else self._budget(body, key, n)

    def inline_edit(self, p: str) -> tuple[list[str], dict[str, Any]]:
        """`edit` as source lines for a compiled request function (`compiled.py`), and the
        names they use (each starting with `p`): the count inline, the rare rest called."""
        names = {f"{p}self": self, f"{p}turns": self.turns, f"{p}order": self._order,
                 f"{p}session_of": _session_of, f"{p}max": _MAX_SESSIONS, f"{p}every": self.every,
                 f"{p}log": self.log, f"{p}debug": logging.DEBUG, f"{p}act": self._act_from}
        lines = [
            f"{p}key = session_id or {p}session_of(body)",
            f"{p}n = {p}turns.get({p}key, 0) + 1",
            f"if {p}n == 1:",
            f"    if len({p}turns) >= {p}max:",
            f"        del {p}turns[{p}order.popleft()]",
            f"    {p}order.append({p}key)",
            f"{p}turns[{p}key] = {p}n",
            f"if ({p}n == 1 or {p}n % {p}every == 0) and {p}log.isEnabledFor({p}debug):",
            f"    {p}self._log_turn({p}key, {p}n)",
            f"if {p}n >= {p}act:",
            f"    out = {p}self._budget(body, {p}key, {p}n)",
            "    if out is not None:",
            "        body = out",
            "        changed = True",
        ]
        return lines, names

    def _log_turn(self, key: str, n: int) -> None:
        self.log.debug("session %s turn %d%s", key, n, f"/{self.max_turns}" if self.max_turns else "")

    def _budget(self, body: dict[str, Any], key: str, n: int) -> dict[str, Any] | None:
        """Turn `n` of session `key` from `_act_from` on: refused past the budget, else
        its reminder put into the body (the body, or None when it gets none)."""
        assert self.max_turns is not None
        if n > self.max_turns:
            self.refused += 1
            raise InterceptorError("turn_counter", f"turn budget exhausted: turn {n} of "
                                   f"max_turns={self.max_turns} for session {key}")
        if n < self._notice_from:
            return None
        notice = self._notice(n)
        messages = body.get("messages")
        if notice is None or not isinstance(messages, list):
            return None
        if self.position == "system_message":
            messages.append({"role": "system", "content": notice})
            return body
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user":
                c = m.get("content")
                if isinstance(c, list):
                    c.append({"type": "text", "text": notice})
                else:
                    m["content"] = f"{c}\n\n{notice}" if c else notice
                break
        return body

    def stats(self) -> dict[str, Any]:
        """Sessions seen and requests refused."""
        return {"turn_sessions": len(self.turns), "turns_refused": self.refused}


def build(cfg: dict[str, Any], env: ChainEnv) -> TurnCounter:
    """The interceptor from its checked config."""
    return TurnCounter(cfg)
