"""`nel serve`'s app object: the hot routes' direct dispatch keeps the app's contract."""

from __future__ import annotations

from typing import Any

from tests.benchmarks.test_serve import ToyArithmetic


def test_middleware_a_caller_adds_sees_the_hot_routes_too() -> None:
    from fastapi.testclient import TestClient

    from benchmarks.serve_app import generate_app

    seen: list[str] = []
    app = generate_app(ToyArithmetic())

    @app.middleware("http")
    async def record(request: Any, call_next: Any) -> Any:
        seen.append(request.url.path)
        return await call_next(request)

    with TestClient(app) as client:
        assert client.post("/seed_session", json={"idx": 1}).status_code == 200
        verdict = client.post("/verify", json={"response": "so 8", "expected": "8"}).json()
        assert client.post("/verify", content=b"[1]").json()["error"] == "invalid_request"
    assert verdict["reward"] == 1.0
    assert seen == ["/seed_session", "/verify", "/verify"]
