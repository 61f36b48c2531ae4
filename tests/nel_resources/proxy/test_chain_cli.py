"""`nel eval run` through a service's chain: a rerun with `caching` sends no request and
reports the hits; a bad interceptor field is one line with its file:line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_nel
from tests.support.reference import server_stats


def _cfg(path: Path, url: str, cache: Path, extra: str = "") -> Path:
    path.write_text(
        "services:\n"
        "  m:\n"
        "    type: api\n"
        f"    url: {url}\n"
        "    model: tiny\n"
        "    temperature: 0.7\n"
        "    interceptors:\n"
        "      - name: caching\n"
        "        config:\n"
        f"          cache_dir: {cache}\n"
        "      - name: system_message\n"
        "        config:\n"
        "          system_message: Answer with a number.\n"
        f"{extra}"
        "benchmarks:\n"
        "  - name: gsm8k\n"
        "    max_problems: 4\n"
        "    repeats: 2\n"
    )
    return path


def test_rerun_with_caching_sends_no_request(tmp_path: Path, reference_server, data_dir) -> None:
    url = reference_server()
    cfg = _cfg(tmp_path / "nel.yaml", url, tmp_path / "cache")
    env = {"NEL_DATA_DIR": str(data_dir)}
    first = run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "a"), env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    stats = server_stats(url)
    assert stats["total_requests"] == 4 * 2 + 1  # 8 samples + the /models preflight
    assert stats["system_messages"]["last"] == "Answer with a number."
    # A fresh output dir: every shard is rebuilt, from the cache.
    second = run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "b"), env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert server_stats(url)["total_requests"] == stats["total_requests"] + 1  # the preflight only
    rt = json.loads(next((tmp_path / "b").rglob("runtime_stats.json")).read_text())
    assert rt["interceptors"]["cache_hits"] == 8 and rt["interceptors"]["cache_misses"] == 0
    assert rt["interceptors"]["cache_saved_tokens"] > 0
    b1 = json.loads(next((tmp_path / "a").rglob("bundle.json")).read_text())
    b2 = json.loads(next((tmp_path / "b").rglob("bundle.json")).read_text())
    assert b1["score"]["mean"] == b2["score"]["mean"]
    assert b1["runtime"]["interceptors"]["cache_misses"] == 8


def test_bad_interceptor_field_is_one_line_with_its_line(tmp_path: Path) -> None:
    cfg = tmp_path / "nel.yaml"
    _cfg(cfg, "http://127.0.0.1:9/v1", tmp_path / "c",
         "      - name: turn_counter\n        config:\n          max_turns: lots\n")
    proc = run_nel("eval", "run", str(cfg), "-o", str(tmp_path / "o"))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{cfg}:16" in lines[0] and "turn_counter" in lines[0] and "max_turns" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
