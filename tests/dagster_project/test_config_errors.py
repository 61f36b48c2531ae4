"""Malformed configs and flags: one clear line each, exit 2, no traceback, no request sent.

Table-driven through the real `nel eval run` subprocess against a reference server whose
`/stats` must show that not one request reached it. Classes covered: unreadable files
(binary, UTF-16, a directory, huge), YAML that expands without bound (alias bomb,
recursive alias), configs that would run nothing (empty, no services, no benchmarks),
values that would misbehave (`timeout: 0`, `output.dir: ''`, zero or negative counts) and
plain mistakes (unknown keys, wrong types, unknown service references).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import run_nel
from tests.support.reference import http_json, server_stats


def _good(url: str, **bench: object) -> str:
    extra = "".join(f"\n    {k}: {v}" for k, v in bench.items())
    return (
        f"services:\n  m:\n    type: api\n    url: {url}\n    model: tiny\n"
        f"benchmarks:\n  - name: gsm8k{extra}\n"
    )


def _svc(url: str, line: str) -> str:
    return (
        f"services:\n  m:\n    type: api\n    url: {url}\n    model: tiny\n    {line}\n"
        "benchmarks:\n  - name: gsm8k\n"
    )


BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )
)

# id -> (config file content: str, bytes, or a builder taking the server URL; extra CLI
# args; a fragment the one error line must contain). `{cfg}` in args is the config path.
CASES: dict[str, tuple[object, list[str], str]] = {
    # unreadable or unbounded files
    "binary_file": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), [], "UTF-8"),
    "utf16_file": ("services: {}\n".encode("utf-16"), [], "UTF-8"),
    "nul_bytes": (b"services:\x00\n", [], "NUL"),
    "directory": ("DIR", [], "is a directory"),
    "missing_file": ("MISSING", [], "not found"),
    "huge_file": ("# pad\n" * 4_000_000, [], "bytes is not a config"),
    "alias_bomb": (BOMB, [], "aliases expand"),
    "recursive_alias": ("a: &a [*a]\n", [], "alias"),
    "invalid_yaml": ("services: [\n", [], "invalid YAML"),
    "tab_indent": ("services:\n\tm: {}\n", [], "invalid YAML"),
    # configs that would run nothing
    "empty_file": ("", [], "empty"),
    "only_comment": ("# nothing\n", [], "empty"),
    "not_a_mapping": ("- a\n- b\n", [], "must be a mapping"),
    "scalar": ("hello\n", [], "must be a mapping"),
    "no_services": ("benchmarks:\n  - name: gsm8k\n", [], "no model service"),
    "no_benchmarks": (lambda u: f"services:\n  m: {{type: api, url: {u}}}\n", [], "no benchmarks"),
    "empty_benchmarks": (lambda u: f"services:\n  m: {{type: api, url: {u}}}\nbenchmarks: []\n", [],
                         "no benchmarks"),
    "judge_only_service": (lambda u: f"services:\n  j: {{type: api, url: {u}, role: judge}}\n"
                           "benchmarks:\n  - name: gsm8k\n", [], "no model service"),
    # values that would misbehave
    "timeout_zero": (lambda u: _svc(u, "timeout: 0"), [], "timeout"),
    "timeout_negative": (lambda u: _svc(u, "timeout: -5"), [], "timeout"),
    "connect_timeout_zero": (lambda u: _svc(u, "connect_timeout: 0"), [], "connect_timeout"),
    "max_concurrent_zero_cfg": (lambda u: _svc(u, "max_concurrent: 0"), [], "max_concurrent"),
    "max_retries_negative": (lambda u: _svc(u, "max_retries: -1"), [], "max_retries"),
    "output_dir_empty": (lambda u: _good(u) + "output:\n  dir: ''\n", [], "output.dir"),
    "repeats_zero_cfg": (lambda u: _good(u, repeats=0), [], "repeats"),
    "repeats_negative_cfg": (lambda u: _good(u, repeats=-2), [], "repeats"),
    "max_problems_zero_cfg": (lambda u: _good(u, max_problems=0), [], "max_problems"),
    "shards_zero_cfg": (lambda u: _good(u, shards=0), [], "shards"),
    "num_fewshot_negative": (lambda u: _good(u, num_fewshot=-1), [], "num_fewshot"),
    "cluster_shards_zero": (lambda u: _good(u) + "cluster:\n  shards: 0\n", [], "cluster.shards"),
    # plain mistakes
    "unknown_top_key": (lambda u: _good(u) + "servces: {}\n", [], "unknown key 'servces'"),
    "unknown_service_key": (lambda u: _svc(u, "urll: x"), [], "unknown key"),
    "bad_service_type": (lambda u: _good(u).replace("type: api", "type: banana"), [], "type"),
    "bad_protocol": (lambda u: _svc(u, "protocol: grpc"), [], "protocol"),
    "timeout_string": (lambda u: _svc(u, "timeout: soon"), [], "timeout"),
    "unknown_service_ref": (lambda u: _good(u, service="nope"), [], "'nope'"),
    "unset_env_var": (lambda u: _svc(u, "api_key: ${NEL_TEST_SURELY_UNSET_VAR}"), [],
                      "NEL_TEST_SURELY_UNSET_VAR"),
    "unknown_benchmark": (lambda u: _good(u).replace("gsm8k", "gsm9k"), [], "gsm9k"),
    "step_pattern_no_group": (lambda u: _good(u) + "checkpoints:\n  step_pattern: 'ep\\d+'\n", [],
                              "needs exactly one"),
    "step_pattern_bad_regex": (lambda u: _good(u) + "checkpoints:\n  step_pattern: 'ep(\\d+'\n", [],
                               "not a valid regex"),
    # flags
    "flag_max_concurrent_zero": (_good, ["--max-concurrent", "0"], "--max-concurrent"),
    "flag_max_concurrent_negative": (_good, ["--max-concurrent", "-3"], "--max-concurrent"),
    "flag_shards_zero": (_good, ["--shards", "0"], "--shards"),
    "flag_repeats_negative": (_good, ["-n", "-1"], "--repeats"),
    "flag_max_problems_zero": (_good, ["-m", "0"], "--max-problems"),
    "flag_output_dir_empty": (_good, ["-o", ""], "--output-dir"),
    "flag_override_bad": (_good, ["-O", "nokeyvalue"], "KEY=VALUE"),
    "flag_override_timeout_zero": (_good, ["-O", "services.m.timeout=0"], "timeout"),
    "flag_model_url_with_config": (_good, ["--model-url", "http://127.0.0.1:1/v1"], "--model-url"),
}


def _write_config(tmp_path: Path, content: object, url: str) -> Path:
    path = tmp_path / "nel.yaml"
    if content == "DIR":
        path.mkdir()
    elif content == "MISSING":
        pass
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(content(url))  # type: ignore[operator]
    return path


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_config_or_flag(case: str, tmp_path: Path, ref_url: str) -> None:
    content, args, fragment = CASES[case]
    cfg = _write_config(tmp_path, content, ref_url)
    out = tmp_path / "out"
    argv = ["eval", "run", str(cfg), *args]
    if "-o" not in args:
        argv += ["-o", str(out)]
    env = {"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", str(tmp_path / "no-data"))}
    proc = run_nel(*argv, env=env, timeout=120)
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    shown = proc.stderr[-3000:]
    assert proc.returncode == 2, f"{case}: exit {proc.returncode}, expected 2; stderr:\n{shown}"
    assert "Traceback" not in proc.stderr, f"{case}: traceback shown:\n{shown}"
    assert len(err_lines) == 1, f"{case}: expected one error line, got {len(err_lines)}:\n{shown}"
    assert fragment in err_lines[0], f"{case}: {fragment!r} not in the error: {err_lines[0]}"
    assert proc.stdout.strip() == "", f"{case}: printed on stdout: {proc.stdout[:500]}"
    stats = server_stats(ref_url)
    assert stats["total_requests"] == 0, f"{case}: {stats['total']} request(s) reached the server"


def test_request_counter_counts() -> None:
    """The 0-requests check above can fail: one real request shows up in /stats."""
    from nel_resources.reference_server import start_reference_server

    proc, url = start_reference_server()
    try:
        status, _, _ = http_json(
            "POST",
            url + "/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert status == 200
        assert server_stats(url)["total_requests"] == 1
    finally:
        proc.stop()
