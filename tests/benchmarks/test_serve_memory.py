"""`nel serve` as a real process keeps its memory bounded on a hostile /verify body.

A 700 KB reply of nested `\\boxed{` (under the 1 MB body limit) once got `nel serve`
OOM-killed at 20 GB: the box extractor copied every nested level. The server here runs
under an address-space cap (so a regression fails the test instead of taking the machine
down), and its peak resident set (VmHWM) is read before and after the request.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nel_resources.runtime.processes import ManagedProcess, start_on_free_port

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 120.0
# The server may not map more than this; quadratic scoring of the body needs ~35 GB.
ADDRESS_SPACE_CAP = 4_000_000_000
# Growth of the server's peak RSS the hostile body may cause (the body is 0.7 MB).
MAX_GROWTH_BYTES = 150_000_000

BYOB = '''
from benchmarks.byob import benchmark, scorer
from benchmarks.scoring import math_match

@benchmark(name="nested_math", dataset=[{"q": "6*7", "a": "42"}], prompt="{q}",
           target_field="a")
@scorer
def nested(inp):
    return math_match(inp.response, inp.target)
'''


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[ManagedProcess, int]]:
    module = tmp_path / "nested_math.py"
    module.write_text(BYOB)

    def make(port: int) -> ManagedProcess:
        return ManagedProcess(
            ["prlimit", f"--as={ADDRESS_SPACE_CAP}", "--", sys.executable, "-m",
             "dagster_project.cli.main", "serve", "-b", "nested_math", "--import", str(module),
             "--port", str(port)],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO)},
            name="nel-serve-memory",
        )

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health")
    try:
        yield proc, port
    finally:
        proc.stop()


def _post_verify(port: int, reply: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"response": reply, "expected_answer": "42"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/verify", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=WAIT_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _peak_rss_bytes(pid: int) -> int:
    """VmHWM: the most memory the process has ever had resident."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def nested_boxes(body_bytes: int) -> str:
    """`\\boxed{` nested as deep as a JSON body of about `body_bytes` allows, around 42."""
    levels = body_bytes // len(json.dumps("\\boxed{}")[1:-1])
    return "\\boxed{" * levels + "42" + "}" * levels


def test_a_700kb_nested_box_is_answered_with_bounded_memory(served) -> None:
    proc, port = served
    status, verdict = _post_verify(port, "so \\boxed{42}")  # warm up: imports, sympy
    assert (status, verdict["reward"]) == (200, 1.0), verdict
    before = _peak_rss_bytes(proc.pid)
    reply = nested_boxes(700_000)
    status, verdict = _post_verify(port, reply)
    after = _peak_rss_bytes(proc.pid)
    print(f"nel serve peak RSS {before / 1e6:.0f} MB -> {after / 1e6:.0f} MB "
          f"on a {len(reply) / 1e3:.0f} KB nested-box reply: {status} {str(verdict)[:200]}")
    assert status in (200, 422), verdict
    assert ("reward" in verdict) if status == 200 else verdict["error"].startswith("scorer_")
    assert after - before < MAX_GROWTH_BYTES, (
        f"peak RSS grew by {(after - before) / 1e6:.0f} MB on a {len(reply) / 1e3:.0f} KB body"
    )
    assert proc.returncode is None and _post_verify(port, "\\boxed{42}")[0] == 200
