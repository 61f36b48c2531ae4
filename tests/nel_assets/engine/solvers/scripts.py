"""Scripted tool-calling turns for the reference server (`ToolScript` rows) that solve, or
fail, nel's `agent_tasks` and a few probe problems: shared by the solver tests, the
end-to-end tests and `bench/bench_tool_calling.py`."""

from __future__ import annotations

from typing import Any


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


FIXED_SLUGIFY = "def slugify(text):\n    return '-'.join(text.lower().split())\n"
WRONG_FIZZBUZZ = "import sys\nfor i in range(1, int(sys.argv[1]) + 1):\n    print(i)\n"

#: agent_tasks 0-2 are solved (bash + str_replace_editor; parallel file_read + view then
#: file_write; a shell pipeline), task 3 fails (a failing bash call, then a wrong program).
AGENT_TASKS: list[dict[str, Any]] = [
    {"match": "calc.add", "turns": [
        {"tool_calls": [call("bash", command="cat calc.py")]},
        {"tool_calls": [call("str_replace_editor", command="str_replace", path="calc.py",
                             old_str="return a - b", new_str="return a + b")]},
        {"tool_calls": [call("bash", command="python3 test_calc.py")]},
        {"content": "Fixed calc.add; the test says: {last_tool}"}]},
    {"match": "text_utils.slugify", "turns": [
        {"tool_calls": [call("file_read", path="text_utils.py"),
                        call("str_replace_editor", command="view", path="/workspace/text_utils.py")]},
        {"tool_calls": [call("file_write", path="text_utils.py", content=FIXED_SLUGIFY)]},
        {"content": "slugify lower-cases now."}]},
    {"match": "data.csv is a CSV", "turns": [
        {"tool_calls": [call("bash", command="grep -c ',failed$' data.csv > answer.txt && cat answer.txt")]},
        {"content": "{last_tool} rows failed."}]},
    {"match": "fizzbuzz.py N", "turns": [
        {"tool_calls": [call("bash", command="python3 fizzbuzz.py 15")]},
        {"tool_calls": [call("file_write", path="fizzbuzz.py", content=WRONG_FIZZBUZZ)]},
        {"content": "Done."}]},
]

#: Probe problems: what goes wrong with tool calls (see `PROBES` in the tests).
PROBE_SCRIPT: list[dict[str, Any]] = [
    {"match": "probe-errors", "turns": [
        {"tool_calls": [call("no_such_tool", x=1),
                        {"name": "bash", "arguments_raw": "{\"command\": \"ls\""}]},
        {"content": "{last_tool}"}]},
    {"match": "probe-hang", "turns": [
        {"tool_calls": [call("bash", command="sleep 1000")]},
        {"content": "{last_tool}"}]},
    {"match": "probe-flood", "turns": [
        {"tool_calls": [call("bash", command="yes | head -c 10M")]},
        {"content": "flooded"}]},
    {"match": "probe-artifact", "turns": [
        {"tool_calls": [call("bash", command=(
            "git init -q && git -c user.email=nel@localhost -c user.name=nel commit -q "
            "--allow-empty -m base && echo hello > new.txt && printf 'x\\n' > tracked.txt"))]},
        {"content": "done"}]},
    {"match": "probe-loop", "repeat_last": True, "turns": [
        {"tool_calls": [call("bash", command="echo again && exit 3")]}]},
]
