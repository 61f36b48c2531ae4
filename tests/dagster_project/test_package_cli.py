"""`nel package` builds a real image with the Docker engine and the image serves the BYOB
benchmark; `nel cache-sqsh` and `nel export` refuse what nel cannot do in one line; the same
invocations through the real NeMo Evaluator 0.3.0 give the same exit statuses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_nel
from tests.support.docker_engine import BASE_IMAGE, start_docker_engine
from tests.support.peers import run_peer_nemo
from tests.support.waiting import PROCESS_START_S, wait_for

BENCH = '''
from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer


@benchmark(name="pkg-capitals", dataset="capitals.jsonl",
           prompt="What is the capital of {country}? Answer with the city only.",
           target_field="capital")
@scorer
def check(inp: ScorerInput) -> dict:
    return exact_match(inp)
'''
ROWS = [{"country": "France", "capital": "Paris"}, {"country": "Peru", "capital": "Lima"},
        {"country": "Japan", "capital": "Tokyo"}]


def _bench_dir(root: Path) -> Path:
    d = root / "capitals_bench"
    d.mkdir()
    (d / "capitals.py").write_text(BENCH)
    (d / "capitals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return d


@pytest.fixture(scope="module")
def docker_env() -> dict[str, str]:
    return {"DOCKER_HOST": start_docker_engine()}


def _docker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def container(docker_env: dict[str, str]) -> Iterator[list[str]]:
    """Ids of containers a test started; removed at teardown."""
    ids: list[str] = []
    yield ids
    for cid in ids:
        _docker(docker_env, "rm", "-f", cid)


@pytest.mark.docker
def test_package_builds_an_image_that_serves_the_benchmark(tmp_path: Path, docker_env, container,
                                                          data_dir: Path) -> None:
    bench = _bench_dir(tmp_path)
    env = {**docker_env, "NEL_WHEELHOUSE": str(tmp_path.parent / "nel-wheelhouse")}
    tag = f"nel-pkg-test:{os.getpid()}"
    p = run_nel("package", "-m", str(bench), "-t", tag, "--base-image", BASE_IMAGE, env=env, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"Image built: {tag}" in p.stdout and "serves pkg-capitals" in p.stdout

    port = _free_port()
    run = _docker(docker_env, "run", "-d", "-p", f"127.0.0.1:{port}:9090", tag)
    assert run.returncode == 0, run.stderr
    container.append(run.stdout.strip())
    base = f"http://127.0.0.1:{port}"

    def healthy() -> dict | None:
        try:
            return _http(f"{base}/health")
        except OSError:
            return None

    health = wait_for(healthy, timeout=PROCESS_START_S, what="the packaged image's /health")
    assert health["benchmark"] == "pkg-capitals" and health["dataset_size"] == len(ROWS)
    seed = _http(f"{base}/seed_session", {"idx": 1})
    assert seed["prompt"] == "What is the capital of Peru? Answer with the city only."
    assert seed["expected_answer"] == "Lima"
    good = _http(f"{base}/verify", {"response": "Lima", "expected": "Lima", "metadata": seed["metadata"]})
    bad = _http(f"{base}/verify", {"response": "Cusco", "expected": "Lima", "metadata": seed["metadata"]})
    assert (good["reward"], bad["reward"]) == (1.0, 0.0)

    # A changed benchmark rebuilds on top of the same dependency layers (cached).
    (bench / "capitals.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    p2 = run_nel("package", "-m", str(bench), "-t", f"{tag}-b", "--base-image", BASE_IMAGE, env=env,
                 timeout=900)
    assert p2.returncode == 0, p2.stdout + p2.stderr

    def layers(t: str) -> list[str]:
        return json.loads(_docker(docker_env, "image", "inspect", "--format", "{{json .RootFS.Layers}}", t).stdout)

    first, second = layers(tag), layers(f"{tag}-b")
    assert first[:-2] == second[:-2] and first[-1] != second[-1]
    _docker(docker_env, "rmi", "-f", tag, f"{tag}-b")


@pytest.mark.docker
def test_package_output_writes_the_dockerfile_and_its_context(tmp_path: Path, docker_env) -> None:
    bench = _bench_dir(tmp_path)
    env = {**docker_env, "NEL_WHEELHOUSE": str(tmp_path.parent / "nel-wheelhouse")}
    out = tmp_path / "Dockerfile.capitals"
    p = run_nel("package", "-m", str(bench / "capitals.py"), "-t", "x:1", "--base-image", BASE_IMAGE,
                "-o", str(out), env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert text.splitlines()[1] == f"FROM {BASE_IMAGE}"
    assert '"--import", "/app/bench/capitals.py"' in text
    ctx = tmp_path / "Dockerfile.capitals.context"
    # the module and the dataset it names, nel's own source, and the wheels
    assert {p.name for p in (ctx / "bench").iterdir()} == {"capitals.py", "capitals.jsonl"}
    assert (ctx / "nel" / "benchmarks" / "serve.py").is_file()
    assert any(p.name.startswith("fastapi-") for p in (ctx / "wheels").iterdir())


def test_package_refuses_bad_modules_and_a_missing_docker(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    none = tmp_path / "none.py"
    none.write_text("X = 1\n")
    p = run_nel("package", "-m", str(none), "-t", "x:1", env={"PATH": str(empty_path)})
    assert p.returncode == 2 and "registers no benchmark" in p.stderr and p.stderr.count("\n") == 1
    bench = _bench_dir(tmp_path)
    p = run_nel("package", "-m", str(bench), "-t", "x:1", env={"PATH": str(empty_path)})
    assert p.returncode == 2 and "docker not found: install" in p.stderr and p.stderr.count("\n") == 1


def test_cache_sqsh_without_enroot_says_what_to_install(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    for host in ("localhost", "127.0.0.1"):
        p = run_nel("cache-sqsh", "bb:latest", host, str(tmp_path / "sqsh"), env={"PATH": str(empty_path)})
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and "needs enroot" in p.stderr and "install NVIDIA enroot" in p.stderr
        assert not (tmp_path / "sqsh").exists()
    p = run_nel("cache-sqsh", "harbor", "localhost", str(tmp_path))
    assert p.returncode == 2 and "not supported yet in nel" in p.stderr and p.stderr.count("\n") == 1


def test_export_of_a_file_that_is_not_a_bundle_is_one_line(tmp_path: Path) -> None:
    runs = tmp_path / "run"
    (runs / "gsm8k").mkdir(parents=True)
    (runs / "gsm8k" / "eval-20260101T000000Z-gsm8k.json").write_text("{}")
    # every exporter is built (tests/nel_resources/exporters): a file that is not a bundle
    # with its samples is one line, and nothing is written for it
    for dest, why in (("inspect", "no results.jsonl beside it"), ("mlflow", "not a bundle"),
                      ("wandb", "not a bundle")):
        p = run_nel("export", str(runs), "--dest", dest)
        assert p.returncode == 1 and p.stderr.startswith("Error: ") and why in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert not (runs / "mlflow").exists() and not (runs / "wandb").exists()  # nothing logged for it
    p = run_nel("export", str(runs), "--dest", "bogus")
    assert p.returncode == 1 and p.stderr.strip() == "Error: Unknown exporter 'bogus'. Available: every_eval_ever, inspect, mlflow, wandb"


def test_same_exit_statuses_as_nemo_evaluator(tmp_path: Path) -> None:
    """package/export/cache-sqsh/config invocations both tools can run, with the same status."""
    home = tmp_path / "home"
    home.mkdir()
    bundle_dir = tmp_path / "bundles"
    bundle_dir.mkdir()
    (bundle_dir / "eval-abc.json").write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "NEL_USER_CONFIG": str(home / "nel.yaml")}
    cases = [
        (["package", "-m", str(tmp_path / "nothere.py"), "-t", "x:1"], 1),
        (["package", "-t", "x:1"], 2),
        (["export", str(bundle_dir), "--dest", "bogus"], 1),
        (["export", str(empty), "--dest", "mlflow"], 1),
        (["export", str(tmp_path / "missing"), "--dest", "mlflow"], 2),
        (["export", str(bundle_dir)], 2),
        (["cache-sqsh", "bb:latest"], 2),
        (["config", "get", "model_url"], 1),
        (["config", "unset", "model_url"], 1),
        (["config", "set", "model_url", "http://127.0.0.1:9/v1"], 0),
        (["config", "get", "model_url"], 0),
        (["config", "show"], 0),
        (["config", "unset", "model_url"], 0),
        (["config", "get", "model_url"], 1),
    ]
    for args, status in cases:
        theirs = run_peer_nemo(*args, env=env, cwd=tmp_path)
        ours = run_nel(*args, env=env, cwd=tmp_path)
        assert theirs.returncode == status, (args, theirs.stdout, theirs.stderr)
        assert ours.returncode == status, (args, ours.stdout, ours.stderr)
        assert "Traceback" not in ours.stderr
        if args[:2] == ["config", "get"] and status == 0:
            assert ours.stdout == theirs.stdout == "http://127.0.0.1:9/v1\n"
        if status == 1 and args[0] in ("package", "config"):
            assert ours.stderr.strip() == theirs.stderr.strip(), args
