"""`nel serve`: routes, the Gym form, bad input, the export, and a real served process.

The tests serve a small arithmetic environment registered under a test-only name, so they
do not depend on any built-in benchmark's data; the served process imports this module
(`--import tests.benchmarks.test_serve`) to find it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import EvalEnvironment, SeedResult, VerifyResult, register
from benchmarks.errors import NelError
from nel_resources.runtime.processes import ManagedProcess, start_on_free_port
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S

ROOT = Path(__file__).resolve().parents[2]
TOY_NAME = "nel_test_toy_arith"
TOY_SIZE = 12


@register(TOY_NAME)
class ToyArithmetic(EvalEnvironment):
    """Problem i asks for i + i; the answer is the last integer in the response.

    Even items carry a system prompt; a response containing BOOM makes the scorer raise,
    to exercise the server's handling of scorer failures.
    """

    name = TOY_NAME
    version = "3"

    def __init__(self, n: int = TOY_SIZE):
        self.n = n

    async def seed(self, idx: int) -> SeedResult:
        return SeedResult(
            prompt=f"What is {idx} + {idx}?",
            expected_answer=str(2 * idx),
            metadata={"idx": idx, "parity": idx % 2},
            system="Answer with a number." if idx % 2 == 0 else None,
        )

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        if "BOOM" in response:
            raise RuntimeError("scorer exploded")
        source = "content"
        numbers = re.findall(r"-?\d+", response)
        reasoning = metadata.get("reasoning")
        if not numbers and isinstance(reasoning, str):
            numbers, source = re.findall(r"-?\d+", reasoning), "reasoning"
        got = numbers[-1] if numbers else None
        return VerifyResult(
            reward=float(got is not None and got == expected),
            extracted_answer=got,
            scoring_details={"method": "last_int", "source": source},
            metadata={"parity_seen": metadata.get("parity")},
        )

    def __len__(self) -> int:
        return self.n


class _BrokenSeed(ToyArithmetic):
    """seed() returns something that is not a SeedResult: a server-side bug."""

    async def seed(self, idx: int) -> Any:  # type: ignore[override]
        return object()


# ----------------------------------------------------------------------------- helpers


def responses_api_body(text: str, reasoning: str | None = None) -> dict[str, Any]:
    """A Responses-API response object as NeMo Gym's NeMoGymResponse serialises it."""
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        output.append(
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reasoning}],
            }
        )
    output.append(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000.0,
        "model": "policy",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def chat_completion_body(text: str | None, reasoning: str | None = None) -> dict[str, Any]:
    """An OpenAI chat completion as vLLM returns it (reasoning_content when separated)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "policy",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def gym_row(idx: int) -> dict[str, Any]:
    """A dataset row as `--export-data` writes it and ng_collect_rollouts forwards it."""
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"What is {idx}+{idx}?"}]
        },
        "expected_answer": str(2 * idx),
        "uuid": "u",
        "eval_type": TOY_NAME,
        "metadata": {"idx": idx, "parity": idx % 2},
    }


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from benchmarks.serve import generate_app

    with TestClient(generate_app(ToyArithmetic()), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def gym_client() -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from benchmarks.serve import generate_app

    app = generate_app(ToyArithmetic(), gym_compat=True, max_body_bytes=10_000)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def assert_client_error(resp: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert "reward" not in body
    assert "Traceback" not in resp.text
    if field is not None:
        assert body["field"] == field, body
    return body


# ----------------------------------------------------------------------------- basic routes


def test_health_and_size(client: Any) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok"
    assert health["benchmark"] == TOY_NAME
    assert health["dataset_size"] == TOY_SIZE
    # NeMo Evaluator 0.3.0's strings: "evaluator", or "gym" with --gym-compat
    assert health["protocol"] == "evaluator"
    assert client.get("/dataset_size").json() == {"size": TOY_SIZE}


def test_seed_session_shape(client: Any) -> None:
    body = client.post("/seed_session", json={"idx": 4}).json()
    assert body == {
        "prompt": "What is 4 + 4?",
        "expected_answer": "8",
        "metadata": {"idx": 4, "parity": 0},
        "messages": None,
        "system": "Answer with a number.",
        "sandbox_spec": None,
    }


@pytest.mark.parametrize("idx", [TOY_SIZE, -1, 10**30])
def test_seed_out_of_range_is_400(client: Any, idx: int) -> None:
    body = assert_client_error(client.post("/seed_session", json={"idx": idx}), 400, "idx")
    assert "outside" in body["detail"]


@pytest.mark.parametrize("idx", ["3", 3.0, 2.5, True, None, [1], {"a": 1}])
def test_seed_non_integer_is_422(client: Any, idx: Any) -> None:
    assert_client_error(client.post("/seed_session", json={"idx": idx}), 422, "idx")


def test_seed_missing_idx(client: Any, gym_client: Any) -> None:
    first = client.post("/seed_session", json={"idx": 0}).json()
    # As NeMo Evaluator: idx defaults to 0, with an empty object, no body at all, or the
    # dataset row NeMo Gym's agent posts to start a session.
    assert client.post("/seed_session", json={}).json() == first
    assert client.post("/seed_session").json() == first
    assert client.post("/seed_session", json=gym_row(1)).json() == first
    # --gym-compat answers Gym's empty BaseSeedSessionResponse instead.
    resp = gym_client.post("/seed_session", json=gym_row(1))
    assert resp.status_code == 200 and resp.json() == {}
    assert gym_client.post("/seed_session").json() == {}
    assert gym_client.get("/health").json()["protocol"] == "gym"


# ----------------------------------------------------------------------------- verify forms


def test_verify_evaluator_form(client: Any) -> None:
    ok = client.post(
        "/verify", json={"response": "so 8", "expected": "8", "metadata": {"parity": 0}}
    )
    assert ok.json() == {
        "reward": 1.0,
        "extracted_answer": "8",
        "scoring_details": {"method": "last_int", "source": "content"},
        "metadata": {"parity_seen": 0},
    }
    bad = client.post("/verify", json={"response": "7", "expected": "8"}).json()
    assert bad["reward"] == 0.0 and bad["extracted_answer"] == "7"
    # Numeric expected answers (common in datasets) are accepted.
    assert client.post("/verify", json={"response": "8", "expected": 8}).json()["reward"] == 1.0


def test_verify_gym_responses_api_form(client: Any) -> None:
    body = {**gym_row(3), "response": responses_api_body("The answer is 6.")}
    resp = client.post("/verify", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    # NeMo Gym's BaseVerifyResponse: the request echoed back plus a top-level reward.
    assert out["reward"] == 1.0
    assert out["responses_create_params"] == body["responses_create_params"]
    assert out["response"] == body["response"]
    assert out["expected_answer"] == "6" and out["uuid"] == "u"
    assert out["extracted_answer"] == "6"
    assert out["metadata"]["idx"] == 3 and out["metadata"]["parity_seen"] == 1

    wrong = {**gym_row(3), "response": responses_api_body("7")}
    assert client.post("/verify", json=wrong).json()["reward"] == 0.0


def test_verify_gym_reasoning_and_multi_message(client: Any) -> None:
    # The answer only in the reasoning item: the scorer gets it as `reasoning`.
    body = {**gym_row(2), "response": responses_api_body("", reasoning="2+2 is 4")}
    out = client.post("/verify", json=body).json()
    assert out["reward"] == 1.0 and out["scoring_details"]["source"] == "reasoning"
    # Tool calls and several messages: text of assistant messages only, newline-joined.
    resp = responses_api_body("first 1")
    resp["output"] += [
        {"type": "function_call", "name": "calc", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "99"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4"}]},
    ]
    out = client.post("/verify", json={**gym_row(2), "response": resp}).json()
    assert out["reward"] == 1.0 and out["extracted_answer"] == "4"


def test_verify_chat_completion_form(client: Any) -> None:
    out = client.post(
        "/verify", json={"response": chat_completion_body("10"), "expected": "10"}
    ).json()
    assert out["reward"] == 1.0
    out = client.post(
        "/verify",
        json={"response": chat_completion_body(None, reasoning="it is 10"), "expected": "10"},
    ).json()
    assert out["reward"] == 1.0 and out["scoring_details"]["source"] == "reasoning"
    parts = chat_completion_body(None)
    parts["choices"][0]["message"]["content"] = [{"type": "text", "text": "10"}]
    assert (
        client.post("/verify", json={"response": parts, "expected": "10"}).json()["reward"] == 1.0
    )


def test_verify_gym_string_response_and_expected_in_metadata(client: Any) -> None:
    row = gym_row(5)
    del row["expected_answer"]
    row["metadata"]["expected_answer"] = "10"
    out = client.post("/verify", json={**row, "response": "10"}).json()
    assert out["reward"] == 1.0 and "responses_create_params" in out


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "response"),
        ({"expected": "1"}, "response"),
        ({"response": "1"}, "expected"),
        ({"response": None, "expected": "1"}, "response"),
        ({"response": 5, "expected": "1"}, "response"),
        ({"response": "1", "expected": True}, "expected"),
        ({"response": "1", "expected": ["1"]}, "expected"),
        ({"response": "1", "expected": "1", "metadata": []}, "metadata"),
        ({"response": {"foo": 1}, "expected": "1"}, "response"),
        ({"response": {"output": "x"}, "expected": "1"}, "response.output"),
        ({"response": {"output": [3]}, "expected": "1"}, "response.output[0]"),
        ({"response": {"choices": []}, "expected": "1"}, "response.choices"),
        (
            {"response": "1", "expected": "1", "responses_create_params": "x"},
            "responses_create_params",
        ),
    ],
)
def test_verify_malformed_is_422_naming_field(
    client: Any, body: dict[str, Any], field: str
) -> None:
    assert_client_error(client.post("/verify", json=body), 422, field)


@pytest.mark.parametrize("raw", [b"", b"   ", b"{not json", b"[1, 2]", b'"str"', b"\xff\xfe\x00"])
def test_verify_non_object_body_is_422(client: Any, raw: bytes) -> None:
    resp = client.post("/verify", content=raw, headers={"content-type": "application/json"})
    assert_client_error(resp, 422, "body")


def test_empty_body_never_scores(client: Any) -> None:
    # NeMo Evaluator 0.3.0 answers `{}` with reward 1.0; we must not.
    resp = client.post("/verify", json={})
    assert resp.status_code == 422 and "reward" not in resp.json()


def test_scorer_exception_is_structured_4xx(client: Any) -> None:
    body = assert_client_error(
        client.post("/verify", json={"response": "BOOM", "expected": "1"}), 422, "response"
    )
    assert body["error"] == "scorer_error" and "RuntimeError: scorer exploded" in body["detail"]


def test_body_limit_by_content_length_and_stream(gym_client: Any) -> None:
    big = {"response": "x" * 20_000, "expected": "1"}
    body = assert_client_error(gym_client.post("/verify", json=big), 413, "body")
    assert body["error"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # chunked transfer: no Content-Length to check
        yield b'{"response": "'
        for _ in range(20):
            yield b"x" * 1000
        yield b'", "expected": "1"}'

    assert_client_error(gym_client.post("/verify", content=chunks()), 413, "body")
    small = gym_client.post("/verify", json={"response": "1", "expected": "1"})
    assert small.status_code == 200


def test_unexpected_error_is_json_without_traceback() -> None:
    from fastapi.testclient import TestClient

    from benchmarks.serve import generate_app

    with TestClient(generate_app(_BrokenSeed()), raise_server_exceptions=False) as c:
        resp = c.post("/seed_session", json={"idx": 0})
    assert resp.status_code == 500
    assert resp.json()["error"] == "internal_error"
    assert "Traceback" not in resp.text and "AttributeError" not in resp.text


def test_unknown_route_and_method(client: Any) -> None:
    assert client.get("/nope").status_code == 404
    assert client.get("/verify").status_code == 405


# ----------------------------------------------------------------------------- export and CLI


def _cli_parser() -> argparse.ArgumentParser:
    from dagster_project.cli import commands_serve

    parser = argparse.ArgumentParser(prog="nel")
    commands_serve.register(parser.add_subparsers(dest="command"))
    return parser


def test_cli_defaults_bind_localhost() -> None:
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME])
    assert (args.host, args.port, args.workers, args.gym_compat) == ("127.0.0.1", 9090, 1, False)


def test_cli_p_is_the_port_and_params_keep_a_long_spelling() -> None:
    # NeMo Evaluator's `nel serve -b gsm8k -p 9090`
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME, "-p", "9191", "--param", "n=3"])
    assert args.port == 9191 and args.param == [("n", 3)]
    with pytest.raises(SystemExit):
        _cli_parser().parse_args(["serve", "-b", TOY_NAME, "-p", "n=3"])


def test_export_data_dir_gets_benchmark_jsonl(tmp_path: Path) -> None:
    """NeMo Evaluator's `--export-data DIR` writes DIR/<benchmark>.jsonl."""
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME, "--export-data", str(tmp_path / "d"),
                                     "--max-problems", "3", "--export-only"])
    assert args.func(args) == 0
    assert len((tmp_path / "d" / f"{TOY_NAME}.jsonl").read_text().splitlines()) == 3


def test_export_only_needs_export_data() -> None:
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME, "--export-only"])
    with pytest.raises(NelError, match="--export-data"):
        args.func(args)


def test_cli_unknown_benchmark_suggests() -> None:
    args = _cli_parser().parse_args(["serve", "-b", "nel_test_toy_arth"])
    with pytest.raises(NelError, match=f"did you mean '{TOY_NAME}'"):
        args.func(args)


def test_export_data(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    args = _cli_parser().parse_args(
        ["serve", "-b", TOY_NAME, "--export-data", str(out), "--max-problems", "5", "--export-only"]
    )
    assert args.func(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5
    assert rows[0]["responses_create_params"]["input"] == [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 0 + 0?"},
    ]
    assert rows[1]["responses_create_params"]["input"] == [
        {"role": "user", "content": "What is 1 + 1?"}
    ]
    assert [r["expected_answer"] for r in rows] == ["0", "2", "4", "6", "8"]
    assert all(r["eval_type"] == TOY_NAME for r in rows)
    assert rows[3]["metadata"] == {"idx": 3, "parity": 1}
    assert len({r["uuid"] for r in rows}) == 5
    assert rows[2]["uuid"] == f"{TOY_NAME}-2"  # NeMo Evaluator's form
    # Deterministic: a second export yields the same ids.
    again = tmp_path / "again.jsonl"
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME, "--export-data", str(again), "--export-only"])
    args.func(args)
    rows2 = [json.loads(line) for line in again.read_text().splitlines()]
    assert len(rows2) == TOY_SIZE
    assert [r["uuid"] for r in rows2[:5]] == [r["uuid"] for r in rows]


def test_exported_row_verifies_as_gym_body(client: Any) -> None:
    import asyncio

    from benchmarks.serve import export_rows

    rows = asyncio.run(export_rows(ToyArithmetic(4)))
    for row in rows:
        expected = row["expected_answer"]
        out = client.post("/verify", json={**row, "response": responses_api_body(expected)}).json()
        assert out["reward"] == 1.0


# ----------------------------------------------------------------------------- real process


def cli_command() -> list[str]:
    """`python -m dagster_project.cli.main`, or the serve module alone while sibling command
    modules that main.py imports are still missing."""
    if importlib.util.find_spec("dagster_project.cli.commands_eval") is not None:
        return [sys.executable, "-m", "dagster_project.cli.main", "serve"]
    return [sys.executable, "-m", "dagster_project.cli.commands_serve"]


def wait_healthy(port: int, proc: ManagedProcess, timeout: float = PROCESS_START_S) -> dict:
    """`/health` of a started server, waiting (bounded) for it; fails with its log if it died."""
    proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout=timeout)
    status, _, body = http_json("GET", f"http://127.0.0.1:{port}/health", timeout=30)
    assert status == 200 and isinstance(body, dict), (status, body)
    return body


def start_server(args: list[str]) -> tuple[ManagedProcess, int]:
    """Start `nel serve` in its own process group on a free 127.0.0.1 port, once healthy.

    The port is picked before the server binds it: if another process (another xdist
    worker) takes it in between, the server exits at once and a fresh port is tried.
    """
    def make(port: int) -> ManagedProcess:
        return ManagedProcess([*cli_command(), *args, "--port", str(port), "--host", "127.0.0.1"],
                              cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, name="nel-serve")

    return start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health", timeout=PROCESS_START_S)


def stop_server(proc: ManagedProcess) -> None:
    """Stop the server's whole process group (its workers too)."""
    proc.stop()


@pytest.fixture(scope="module")
def served() -> Iterator[int]:
    proc, port = start_server(
        [
            "-b",
            TOY_NAME,
            "--import",
            "tests.benchmarks.test_serve",
            "--workers",
            "2",
            "--gym-compat",
            "--max-body-bytes",
            "50000",
        ]
    )
    try:
        wait_healthy(port, proc)
        yield port
    finally:
        stop_server(proc)


def test_real_process_routes(served: int) -> None:
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{served}", timeout=10) as http:
        health = http.get("/health").json()
        assert health == {
            "status": "ok",
            "benchmark": TOY_NAME,
            "dataset_size": TOY_SIZE,
            "protocol": "gym",
            "version": "3",
            "gym_compat": True,
        }
        assert http.get("/dataset_size").json() == {"size": TOY_SIZE}
        seed = http.post("/seed_session", json={"idx": 7}).json()
        assert seed["expected_answer"] == "14"
        assert http.post("/seed_session", json=gym_row(7)).json() == {}
        out = http.post("/verify", json={**gym_row(7), "response": responses_api_body("14")})
        assert out.status_code == 200 and out.json()["reward"] == 1.0
        out = http.post("/verify", json={"response": chat_completion_body("13"), "expected": "14"})
        assert out.json()["reward"] == 0.0
        assert http.post("/seed_session", json={"idx": TOY_SIZE}).status_code == 400
        assert http.post("/verify", json={}).status_code == 422
        big = http.post("/verify", json={"response": "x" * 60_000, "expected": "1"})
        assert big.status_code == 413

        def chunks() -> Iterator[bytes]:
            yield b'{"response": "'
            for _ in range(60):
                yield b"x" * 1000
            yield b'", "expected": "1"}'

        assert http.post("/verify", content=chunks()).status_code == 413


def test_real_process_declared_oversize_body_answered_before_upload(served: int) -> None:
    # Content-Length alone decides: the server answers 413 without waiting for the body.
    with socket.create_connection(("127.0.0.1", served), timeout=5) as s:
        s.sendall(
            b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 900000000\r\n\r\n{"
        )
        head = s.recv(4096).decode()
    assert head.startswith("HTTP/1.1 413"), head


def test_real_process_unknown_benchmark_one_line_error() -> None:
    proc = subprocess.run(
        [*cli_command(), "-b", "nel_test_toy_arth", "--import", "tests.benchmarks.test_serve"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown benchmark 'nel_test_toy_arth'")
    assert TOY_NAME in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- aggregate


def _verify_responses() -> list[dict[str, Any]]:
    """Three tasks x two rollouts, as ng_collect_rollouts posts them (response stripped)."""
    rewards = {0: (1.0, 1.0), 1: (1.0, 0.0), 2: (0.0, 0.0)}
    return [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": rw, "solved": rw == 1.0,
             "extracted_answer": "x", "response": {"usage": {"output_tokens": 10 + t}}}
            for t, pair in rewards.items() for r, rw in enumerate(pair)]


def test_aggregate_metrics(client: Any) -> None:
    out = client.post("/aggregate_metrics", json={"verify_responses": _verify_responses()})
    assert out.status_code == 200
    body = out.json()
    agent = body["agent_metrics"]
    assert agent["mean/reward"] == pytest.approx(0.5) and agent["max/reward"] == 1.0
    assert agent["median/reward"] == 0.5 and agent["std/reward"] == pytest.approx(0.5477, abs=1e-4)
    assert agent["mean/solved"] == pytest.approx(0.5)  # booleans count as 0/1, as in Gym
    assert agent["mean/output_tokens"] == pytest.approx(11.0)  # from response.usage
    # error bars over tasks (per-task means 1, .5, 0), not over the six rollouts
    assert agent["stderr/reward"] == pytest.approx(0.5 / 3**0.5)
    assert agent["pass@1/reward"] == pytest.approx(0.5)
    assert agent["pass@2/reward"] == pytest.approx(2 / 3)
    assert agent["n_tasks"] == 3 and agent["n_rollouts"] == 6
    assert body["key_metrics"] == {k: v for k, v in agent.items() if k.startswith("mean/")}
    groups = body["group_level_metrics"]
    assert [g["_ng_task_index"] for g in groups] == [0, 1, 2]
    assert [g["mean/reward"] for g in groups] == [1.0, 0.5, 0.0]
    assert all(g["num_rollouts"] == 2 for g in groups)
    empty = client.post("/aggregate_metrics", json={"verify_responses": []}).json()
    assert empty == {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}


def test_aggregate_metrics_too_many_rollouts_is_413(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import serve_metrics

    monkeypatch.setattr(serve_metrics, "MAX_ROLLOUTS", 5)
    resp = client.post("/aggregate_metrics", json={"verify_responses": _verify_responses()})
    body = assert_client_error(resp, 413, "verify_responses")
    assert body["error"] == "too_many_rollouts"
    assert "6 rollouts in one request, more than the limit of 5" in body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "verify_responses"),
        ({"verify_responses": {"a": 1}}, "verify_responses"),
        ({"verify_responses": [3]}, "verify_responses[0]"),
        ({"verify_responses": [{"reward": "1"}]}, "verify_responses[0].reward"),
        ({"verify_responses": [{"reward": True}]}, "verify_responses[0].reward"),
        ({"verify_responses": [{"reward": 1, "_ng_task_index": "a"}]},
         "verify_responses[0]._ng_task_index"),
        ({"verify_responses": [{"reward": 1, "_ng_rollout_index": None}]},
         "verify_responses[0]._ng_rollout_index"),
    ],
)
def test_aggregate_metrics_bad_input_is_422(client: Any, body: dict[str, Any], field: str) -> None:
    assert_client_error(client.post("/aggregate_metrics", json=body), 422, field)


def test_export_into_a_directory_named_like_a_file_and_no_temp_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.serve_export as export_module

    odd = tmp_path / "runs.jsonl"
    odd.mkdir()  # an existing directory is a directory, whatever its name
    args = _cli_parser().parse_args(["serve", "-b", TOY_NAME, "--export-data", str(odd),
                                     "--max-problems", "2", "--export-only"])
    assert args.func(args) == 0
    assert len((odd / f"{TOY_NAME}.jsonl").read_text().splitlines()) == 2

    # the disk fills up after the first row: no partial file, no temp file left behind
    real_dumps, calls = export_module.dumps, []

    def failing_dumps(obj: Any) -> bytes:
        calls.append(1)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_dumps(obj)

    monkeypatch.setattr(export_module, "dumps", failing_dumps)
    target = tmp_path / "out" / "rows.jsonl"
    with pytest.raises(OSError, match="No space left"):
        export_module.export_data(ToyArithmetic(3), target)
    assert list(target.parent.iterdir()) == []
