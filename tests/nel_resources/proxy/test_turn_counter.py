"""`turn_counter`'s reminders fall on the turns NeMo Evaluator's triggers name, and its
session table stays bounded at a constant cost per new session."""

from __future__ import annotations

from typing import Any

from nel_resources.proxy import turn_counter
from nel_resources.proxy.env import ChainEnv
from nel_resources.proxy.registry import validate
from nel_resources.proxy.types import ProxyRequest, RequestContext


def _reminded_turns(config: dict[str, Any], turns: int) -> dict[int, str]:
    tc = turn_counter.build(validate("turn_counter", config), ChainEnv())
    out = {}
    for n in range(1, turns + 1):
        req = tc.on_request(ProxyRequest({"messages": [{"role": "user", "content": "go"}]},
                                         ctx=RequestContext("s")))
        extra = req.body["messages"][1:]
        if extra:
            out[n] = extra[0]["content"]
    return out


def test_threshold_reminders_at_80_and_95_percent() -> None:
    got = _reminded_turns({"max_turns": 10}, 10)
    assert sorted(got) == [8, 9, 10]
    assert all("wrapping up" in got[n] for n in (8, 9)) and "final answer" in got[10]


def test_periodic_reminders_every_interval() -> None:
    got = _reminded_turns({"max_turns": 10, "trigger": "periodic", "interval": 3}, 10)
    assert sorted(got) == [3, 6, 9] and "1 turn(s) left" in got[9]


def test_the_oldest_session_is_dropped_past_the_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(turn_counter, "_MAX_SESSIONS", 3)
    tc = turn_counter.build(validate("turn_counter", {}), ChainEnv())
    for s in "abcde":
        tc.on_request(ProxyRequest({"messages": []}, ctx=RequestContext(s)))
    assert list(tc.turns) == ["c", "d", "e"]
