"""The `openclaw` solver's pure parts: its generated home and command, the result document
`openclaw agent --json` prints, OpenClaw's transcript database, and the pairing of tool
details with the captured steps (in the shape of nel's own tool loop). (The real CLI runs in tests/dagster_project/test_openclaw_e2e.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from nel_assets.engine.solvers import openclaw_steps as oc
from nel_assets.engine.solvers.openclaw_home import agent_command, agent_env, make_home

RESULT = {"payloads": [{"text": " Paris ", "mediaUrl": None}, {"text": ""}],
          "meta": {"durationMs": 10, "agentMeta": {"usage": {"input": 3459, "output": 4}}}}


def test_the_result_is_found_after_a_banner_and_its_text_and_usage_read() -> None:
    doc = oc.parse_result("plugin says hi\n{not json\n" + json.dumps(RESULT, indent=2) + "\n")
    assert doc is not None and oc.answer_text(doc) == "Paris"
    assert oc.usage(doc) == (3459, 4)
    assert oc.parse_result("") is None and oc.parse_result("no json at all") is None
    assert oc.parse_result("[1, 2]") is None


def test_a_failed_run_says_why_from_its_result_or_stderr() -> None:
    failed = {"ok": False, "error": {"type": "cli_error", "message": "ended without a reply"}}
    assert oc.error_text(failed, "") == "ended without a reply"
    stderr = "[openclaw] The CLI command failed.\n[openclaw] Reason: HTTP 500\n[openclaw] Try: x\n"
    assert oc.error_text(None, stderr) == "[openclaw] Reason: HTTP 500"
    assert oc.error_text(None, "") == "no output"


def test_each_sample_home_points_at_its_proxy_session_and_holds_no_key(tmp_path: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    home = make_home(tmp_path, "nel-0-0", base_url="http://127.0.0.1:5/s/0:0/v1", model="m/x",
                     system_prompt="Be brief.", context_window=8192, max_concurrent=2)
    cfg = json.loads((home.state / "openclaw.json").read_text())
    provider = cfg["models"]["providers"]["nel"]
    assert provider["baseUrl"] == "http://127.0.0.1:5/s/0:0/v1" and "apiKey" not in provider
    assert provider["models"][0] == {"id": "m/x", "name": "m/x", "input": ["text"],
                                     "contextWindow": 8192}
    assert cfg["agents"]["defaults"]["model"]["primary"] == "nel/m/x"
    assert cfg["agents"]["defaults"]["workspace"] == str(home.workspace)
    assert (home.workspace / "AGENTS.md").read_text() == "Be brief.\n"
    env = agent_env(home)
    assert env["HOME"] == str(home.home) and "OPENAI_API_KEY" not in env
    cmd = agent_command("openclaw", "Q?", "nel-0-0", thinking="off", timeout=7.2)
    # OpenClaw's own limit is past nel's: nel's kill (category timeout) always comes first
    assert cmd[cmd.index("--timeout") + 1] == "38" and cmd[-2:] == ["--thinking", "off"]
    assert {"--json", "--local"} <= set(cmd)


def _transcript(state: Path, events: list[dict]) -> None:
    db = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE transcript_events (session_id TEXT, seq INTEGER, "
                "event_json TEXT, created_at INTEGER, event_zstd BLOB)")
    con.executemany("INSERT INTO transcript_events VALUES ('s', ?, ?, 0, NULL)",
                    [(i, json.dumps(e)) for i, e in enumerate(events)])
    con.commit()
    con.close()


def _tool_result(name: str, code: int, ms: int) -> dict:
    return {"type": "message", "message": {
        "role": "toolResult", "toolName": name, "isError": False,
        "content": [{"type": "text", "text": "x"}],
        "details": {"status": "completed", "exitCode": code, "durationMs": ms}}}


def test_tool_results_become_steps_with_the_transcript_s_exit_codes(tmp_path: Path) -> None:
    _transcript(tmp_path, [{"type": "session", "id": "s"},
                           {"type": "message", "message": {"role": "user", "content": "q"}},
                           _tool_result("exec", 0, 12), _tool_result("exec", 2, 30)])
    results = oc.transcript_tool_results(tmp_path, "s")
    assert [r["exit_code"] for r in results] == [0, 2]
    calls = [{"tool_call_id": "c0", "function_name": "exec"},
             {"tool_call_id": "c1", "function_name": "exec"}]
    captured = [{"source": "user", "message": "q"},
                {"source": "agent", "tool_calls": calls, "extra": {"turn": 1},
                 "observation": {"results": [{"source_call_id": "c0", "content": "a"},
                                             {"source_call_id": "c1", "content": "b"}]}},
                {"source": "agent", "message": "done", "extra": {"turn": 2}}]
    steps, n_calls = oc.tool_steps(captured, results)
    assert n_calls == 2
    # each result is a step of its own after its call, as nel's own tool loop writes them
    assert [s["source"] for s in steps] == ["user", "agent", "system", "system", "agent"]
    assert [s["step_id"] for s in steps] == [1, 2, 3, 4, 5] and "observation" not in steps[1]
    ok, bad = steps[2], steps[3]
    assert ok["message"] == "a" and ok["extra"] == {"turn": 1, "function_name": "exec",
                                                    "exit_code": 0, "latency_ms": 12,
                                                    "error": None}
    assert bad["extra"]["error"] == "exit code 2" and bad["observation"]["results"] == [
        {"source_call_id": "c1", "content": "b", "is_error": True}]
    # the bundle's failure analysis reads them as it reads tool_calling's
    from nel_assets.engine.results.bundle import tool_failures

    assert tool_failures([json.dumps(steps)], ["0:0"])["exec"] == {
        "calls": 2, "failed": 1,
        "examples": [{"sample_id": "0:0", "what": "exec() failed on turn 1 with exit code 2"}]}
    # no database (the agent never started), or another schema: the traffic alone
    assert oc.transcript_tool_results(tmp_path / "none", "s") == []
