"""Bad input found by the drills: each through the real `nel eval run`, exit 2 (usage, see
dagster_project/exit_codes.py), one stderr line naming the problem, no traceback, within a
bounded time, and not one request at the reference server (a bad *second* benchmark must
be refused before the first one sends anything).

Classes: files that are not configs (devices, a FIFO nobody writes to), unbounded input
(5,000-deep YAML, a 5,000-character `-o`), references and includes that do not resolve
(`_base_`, `${A:?msg}`, `${.missing}`), values that would be sent wrongly (`model: ''`,
`Host` / `Content-Length` headers, an invalid host), and config errors that used to surface
only after the first benchmark ran (`-b` naming a benchmark the config lacks, a benchmark
given twice, an unknown benchmark parameter or scorer option).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dagster_project import exit_codes
from tests.support.cli import nel_env, run_nel
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import server_stats


def _cfg(url: str, *benches: str, svc: str = "") -> str:
    return (f"services:\n  m:\n    type: api\n    url: {url}\n    model: tiny\n{svc}"
            "benchmarks:\n  - {name: gsm8k, max_problems: 3}\n" + "".join(f"  - {b}\n" for b in benches))


# id -> (what to give as the config: a builder of its text from the server URL, or a path
# builder taking tmp_path; extra CLI args; a fragment the one error line must contain).
Case = tuple[Callable[..., object], list[str], str]
CASES: dict[str, Case] = {
    "dev_zero": (lambda u: Path("/dev/zero"), [], "is a character device"),
    "dev_null": (lambda u: Path("/dev/null"), [], "is a character device"),
    "fifo_without_writer": (lambda u: "FIFO", [], "nothing more was written to this pipe"),
    "yaml_5000_deep_flow": (lambda u: "a: " + "[" * 5000 + "]" * 5000 + "\n", [], "nested more than"),
    "yaml_5000_deep_block": (lambda u: "a:\n  " + "- " * 5000 + "x\n", [], "nested more than"),
    "output_dir_5000_chars": (_cfg, ["-o", "/tmp/" + "x" * 5000], "--output-dir"),
    "missing_base_file": (lambda u: "_base_: nothere.yaml\n" + _cfg(u), [], "'nothere.yaml' not found"),
    "env_var_required": (lambda u: _cfg(u).replace("model: tiny", "model: ${NEL_T_UNSET_Q:?give the model}"),
                         [], "NEL_T_UNSET_Q is not set: give the model"),
    "env_unknown_form": (lambda u: _cfg(u).replace("model: tiny", "model: ${NEL_T_X:+x}"), [],
                         "is not a reference nel can expand"),
    "self_ref_missing": (lambda u: _cfg(u).replace("model: tiny", "model: ${.missing.key}"), [],
                         "'missing.key', which is not in the config"),
    "model_empty": (lambda u: _cfg(u).replace("model: tiny", "model: ''"), [], "model is empty"),
    "host_header": (lambda u: _cfg(u, svc="    headers: {Host: other.example}\n"), [],
                    "header 'Host' is set by nel"),
    "content_length_header": (lambda u: _cfg(u, svc="    headers: {Content-Length: '5'}\n"), [],
                              "header 'Content-Length' is set by nel"),
    "host_256": (lambda u: _cfg("http://256.1.1.1:8000/v1"), [], "not a valid IPv4 address"),
    "host_bad_name": (lambda u: _cfg("http://bad_host-.example:8000/v1"), [], "not a valid host name"),
    "bench_not_in_config": (_cfg, ["-b", "mmlu"], "-b mmlu: "),
    "bench_twice": (lambda u: _cfg(u, "{name: gsm8k, max_problems: 2}"), [], "appears twice"),
    "second_bench_unknown_param": (lambda u: _cfg(u, "{name: mgsm, max_problems: 2, params: {bogus_opt: 1}}"),
                                   [], "has no parameter 'bogus_opt'"),
    "second_bench_bad_language": (lambda u: _cfg(u, "{name: mgsm, max_problems: 2, params: {languages: [xx]}}"),
                                  [], "unknown language"),
    "second_bench_scorer_option": (
        lambda u: _cfg(u, "{name: mgsm, max_problems: 2, scoring: {metrics: "
                          "[{type: scorer, name: numeric_match, params: {tolerance: 1}}]}}"),
        [], "has no option 'tolerance'"),
}


def _config_path(tmp_path: Path, made: object) -> Path:
    if isinstance(made, Path):
        return made
    path = tmp_path / "nel.yaml"
    if made == "FIFO":
        os.mkfifo(path)
    else:
        path.write_text(str(made))
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path, ref_url: str) -> None:
    build, args, fragment = CASES[case]
    cfg = _config_path(tmp_path, build(ref_url))
    argv = ["eval", "run", str(cfg), "--no-progress", *args]
    if "-o" not in args:
        argv += ["-o", str(tmp_path / "out")]
    t0 = time.monotonic()
    proc = run_nel(*argv, env={"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", "")}, timeout=120)
    elapsed = time.monotonic() - t0
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    shown = proc.stderr[-3000:]
    assert proc.returncode == exit_codes.USAGE, f"{case}: exit {proc.returncode}; stderr:\n{shown}"
    assert "Traceback" not in proc.stderr, f"{case}: traceback:\n{shown}"
    assert len(err_lines) == 1, f"{case}: {len(err_lines)} lines:\n{shown}"
    assert fragment in err_lines[0], f"{case}: {fragment!r} not in: {err_lines[0]}"
    # A FIFO nobody writes to waits its bounded 10 s; everything else is refused at once.
    assert elapsed < 60, f"{case}: took {elapsed:.0f}s"
    assert server_stats(ref_url)["total_requests"] == 0, f"{case}: requests were sent"


def test_config_from_process_substitution_is_read_once(tmp_path: Path, ref_url: str) -> None:
    """`nel eval run <(cat cfg)`: the pipe can be read only once; it used to read as empty."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(_cfg(ref_url))
    nel = f"{sys.executable} -m dagster_project.cli.main"
    proc = subprocess.run(
        ["bash", "-c", f"{nel} eval run <(cat {cfg}) --dry-run -o {tmp_path / 'out'}"],
        capture_output=True, text=True, env=nel_env(), cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "would run: gsm8k" in proc.stdout, proc.stdout[-2000:]


def test_bench_with_config_selects_among_its_benchmarks(tmp_path: Path, ref_url: str) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(_cfg(ref_url, "{name: mgsm, max_problems: 2}"))
    proc = run_nel("eval", "run", str(cfg), "-b", "mgsm", "--dry-run", "--json",
                   "-o", str(tmp_path / "out"),
                   env={"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", "")}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    assert [b["name"] for b in json.loads(proc.stdout)["benchmarks"]] == ["mgsm"]


def test_a_sandbox_image_missing_from_the_engine_is_refused_before_any_request(
        tmp_path: Path, ref_url: str, docker_host: str) -> None:
    """The second benchmark's docker sandbox names an image the engine lacks: the run is
    refused before the first benchmark sends anything (it used to fail every HumanEval
    sample after GSM8K had run). A dry run needs no engine and still plans."""
    cfg = _config_path(tmp_path, _cfg(ref_url, "{name: humaneval, max_problems: 2, sandbox: "
                                      "{type: docker, image: 'nel-no-such-image:404'}}"))
    env = {"NEL_DATA_DIR": os.environ.get("NEL_DATA_DIR", ""), "DOCKER_HOST": docker_host}
    proc = run_nel("eval", "run", str(cfg), "--no-progress", "-o", str(tmp_path / "out"),
                   env=env, timeout=300)
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == exit_codes.USAGE, proc.stderr[-3000:]
    assert len(err_lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "humaneval" in err_lines[0] and "'nel-no-such-image:404' is not in the Docker engine" in err_lines[0]
    assert server_stats(ref_url)["total_requests"] == 0
    dry = run_nel("eval", "run", str(cfg), "--dry-run", "-o", str(tmp_path / "out"),
                  env={**env, "DOCKER_HOST": "unix:///nonexistent.sock"}, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
