"""Configured secrets never reach anything nel writes, even when the server echoes them."""

from __future__ import annotations

from pathlib import Path

from nel_resources.wire.redact import REDACTED, Redactor, client_secrets
from tests.support.cli import run_nel

KEY = "sk-echo-7e3a1f9c5b20"
HEADER_SECRET = "hdr-secret-51c0d2e8"


def test_redactor_replaces_keys_and_bearer_tokens() -> None:
    r = Redactor(client_secrets(KEY, {"X-Api-Token": HEADER_SECRET, "X-Team": "evals-team"}))
    text = f"got Authorization: Bearer {KEY} and X-Api-Token: {HEADER_SECRET}, X-Team: evals-team"
    out = r.text(text)
    assert KEY not in out and HEADER_SECRET not in out and out.count(REDACTED) == 2, out
    assert "evals-team" in out
    assert KEY.encode() not in r.bytes(text.encode())
    assert r.data({"e": [text]}) == {"e": [out]}


def test_echoed_secrets_are_in_no_file_nel_writes(tmp_path: Path, reference_server, data_dir) -> None:
    # Every request fails with 400 and an error body echoing the request headers.
    url = reference_server(echo_headers_status=400)
    cfg = tmp_path / "nel.yaml"
    cfg.write_text(
        "services:\n"
        "  m:\n"
        "    type: api\n"
        f"    url: {url}\n"
        "    model: tiny\n"
        "    max_retries: 0\n"
        "    api_key: ${NEL_TEST_ECHO_KEY}\n"
        "    headers:\n"
        f"      X-Api-Token: {HEADER_SECRET}\n"
        "benchmarks:\n"
        "  - name: gsm8k\n"
        "    max_problems: 3\n"
    )
    out = tmp_path / "out"
    proc = run_nel("eval", "run", str(cfg), "-o", str(out),
                   env={"NEL_TEST_ECHO_KEY": KEY, "NEL_DATA_DIR": str(data_dir)}, timeout=300)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files, f"the run wrote nothing (exit {proc.returncode}): {proc.stderr[-2000:]}"
    # The server did echo the secrets (else this test proves nothing): the errors were
    # recorded with the echoed header text, redacted.
    blobs = {p: p.read_bytes() for p in files}
    assert any(b"rejected request" in b for b in blobs.values()), (
        f"no recorded error text under {out}; stderr: {proc.stderr[-2000:]}")
    for secret in (KEY, HEADER_SECRET):
        leaks = [str(p.relative_to(out)) for p, b in blobs.items() if secret.encode() in b]
        assert not leaks, f"{secret} written to {leaks}"
        assert secret not in proc.stdout and secret not in proc.stderr
