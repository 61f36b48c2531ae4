"""`nel eval run` through a service's chain: a user interceptor from the user's own module
shapes what the server receives; a rerun with `caching` sends no request and reports the
hits; a bad interceptor field is one line with its file:line, exit 2.

The first run is shared by the module's tests (each `nel eval run` is a whole Dagster run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import server_stats

PROBLEMS, REPEATS = 2, 2
# A user interceptor as a user writes one: a plain factory in their own package, named
# `package.module:factory` in the config, its `config:` passed as keyword arguments.
USER_MODULE = """
class _Tag:
    def __init__(self, field, value):
        self.field, self.value = field, value

    async def on_request(self, req):
        req.body[self.field] = self.value
        req.body["messages"][-1]["content"] += " [tagged]"
        return req


def make_tag(field, value="nel"):
    return _Tag(field, value)
"""


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
        f"    max_problems: {PROBLEMS}\n"
        f"    repeats: {REPEATS}\n"
    )
    return path


@dataclass
class FirstRun:
    url: str
    cfg: Path
    out: Path
    env: dict[str, str]
    requests: int
    bodies: list[dict]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[FirstRun]:
    tmp = tmp_path_factory.mktemp("chain_cli")
    pkg = tmp / "userpkg" / "nel_user_tags"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tagging.py").write_text(USER_MODULE)
    proc, url = start_reference_server(record_bodies=50)
    try:
        cfg = _cfg(tmp / "nel.yaml", url, tmp / "cache",
                   "      - name: nel_user_tags.tagging:make_tag\n"
                   "        config:\n"
                   "          field: x_user_tag\n"
                   "          value: from-user-module\n")
        env = {"NEL_DATA_DIR": str(data_dir), "PYTHONPATH": f"{REPO_ROOT}:{tmp / 'userpkg'}"}
        run = run_nel("eval", "run", str(cfg), "-o", str(tmp / "a"), env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        stats = server_stats(url)
        yield FirstRun(url, cfg, tmp / "a", env, stats["total_requests"], stats["bodies"])
    finally:
        proc.stop()


def test_user_interceptor_from_a_module_shapes_the_bodies(first_run: FirstRun) -> None:
    bodies = [b for b in first_run.bodies if isinstance(b, dict) and "messages" in b]
    assert len(bodies) == PROBLEMS * REPEATS
    for b in bodies:
        assert b["x_user_tag"] == "from-user-module"
        assert b["messages"][-1]["content"].endswith(" [tagged]")
        assert b["messages"][0] == {"role": "system", "content": "Answer with a number."}


def test_rerun_with_caching_sends_no_request(first_run: FirstRun, tmp_path: Path) -> None:
    url, env = first_run.url, first_run.env
    assert first_run.requests == PROBLEMS * REPEATS + 1  # the samples + the /models preflight
    # A fresh output dir: every shard is rebuilt, from the cache.
    second = run_nel("eval", "run", str(first_run.cfg), "-o", str(tmp_path / "b"), env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert server_stats(url)["total_requests"] == first_run.requests + 1  # the preflight only
    n = PROBLEMS * REPEATS
    rt = json.loads(next((tmp_path / "b").rglob("runtime_stats.json")).read_text())
    assert rt["interceptors"]["cache_hits"] == n and rt["interceptors"]["cache_misses"] == 0
    assert rt["interceptors"]["cache_saved_tokens"] > 0
    b1 = json.loads(next(first_run.out.rglob("bundle.json")).read_text())
    b2 = json.loads(next((tmp_path / "b").rglob("bundle.json")).read_text())
    assert b1["score"]["mean"] == b2["score"]["mean"]
    assert b1["runtime"]["interceptors"]["cache_misses"] == n


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
