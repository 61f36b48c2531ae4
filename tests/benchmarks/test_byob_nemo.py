"""BYOB files written for NeMo Evaluator 0.3.0 run unchanged in nel, and are valid NeMo files.

The files under `nemo_files/` import only `nemo_evaluator`. Each test loads them in nel
(`nel eval run` with a config's `module:`, `nel serve -b file.py`, `nel validate -b
file.py`, in-process) and, where it can, in the real NeMo Evaluator 0.3.0 (its Python and
its `nel eval run --bench file.py`), against the same reference-server answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import get_benchmark
from benchmarks.errors import NelError
from benchmarks.plugins import load_benchmark_file
from nel_resources.runtime.processes import ManagedProcess, start_on_free_port
from tests.support.cli import run_nel, summary_json
from tests.support.peers import peer_nemo_bin, run_peer_nemo
from tests.support.realcomponents import REPO_ROOT
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S

FILES = Path(__file__).resolve().parent / "nemo_files"
CAPITALS = FILES / "capitals_bench.py"
ARITH = FILES / "arith_env.py"
HOOKS = FILES / "hooks_bench.py"

# Reference-server answers: one right with an Answer line, one wrong, one bare city (right
# by the scorer's exact-match fallback), one right with case and a trailing period.
CAPITAL_ANSWERS = [
    {"match": "France", "content": "Paris is the seat of government.\nAnswer: Paris"},
    {"match": "Japan", "content": "Answer: Osaka"},
    {"match": "Kenya", "content": "Nairobi"},
    {"match": "Peru", "content": "Answer: lima."},
]
CAPITAL_REWARDS = {0: 1.0, 1: 0.0, 2: 1.0, 3: 1.0}
ARITH_ANSWERS = [
    {"match": "2 plus 3", "content": "5"},
    {"match": "10 plus 7", "content": "17."},
    {"match": "6 plus 6", "content": "13"},
    {"match": "40 plus 2", "content": "42"},
    {"match": "9 plus 0", "content": "nine"},
]
ARITH_REWARDS = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 4: 0.0}

# Responses both tools must score alike (the documented differences are left out: a
# second `Answer:` line, articles inside an answer, an empty `fuzzy_match` response).
PROBES = {
    "nemo_style_capitals": ["Answer: {t}", "answer: {l}", "Answer: {t}.", "{t}", "Answer: Rome",
                            "Rome", "I think\nAnswer: {l}\n"],
    "nemo_style_arith": ["{t}", "{t}.", " {t} ", "13", "five"],
    "nemo_style_planets": ["Answer: {t}", "answer: {l}", "I pick\nAnswer: {t}", "Answer: E", "no idea"],
    "nemo_style_sums": ["{t}", "The sum is {t}.", "{t}1", "seven"],
}

# Run in the peer's own Python: load a file through its registry, seed every item and score
# the probes; print JSON. Only the real `nemo_evaluator` is importable there.
PEER_SCRIPT = r"""
import asyncio, json, sys
from nemo_evaluator.environments.registry import get_environment, load_benchmark_file
path, name, probes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
load_benchmark_file(path)
env = get_environment(name)
async def main():
    out = []
    for i in range(len(env)):
        s = await env.seed(i)
        scores = []
        for p in probes:
            r = p.format(t=s.expected_answer, l=s.expected_answer.lower())
            scores.append((await env.verify(r, s.expected_answer, **s.metadata)).reward)
        out.append({"prompt": s.prompt, "expected": s.expected_answer, "system": s.system,
                    "rewards": scores})
    print(json.dumps({"name": env.name, "items": out}))
asyncio.run(main())
"""


def _nel_view(path: Path, name: str, probes: list[str]) -> dict[str, Any]:
    """What nel makes of the file: the same view PEER_SCRIPT prints."""
    load_benchmark_file(path)
    env = get_benchmark(name)

    async def main() -> list[dict[str, Any]]:
        out = []
        for i in range(len(env)):
            s = await env.seed(i)
            scores = []
            for p in probes:
                r = p.format(t=s.expected_answer, l=s.expected_answer.lower())
                scores.append((await env.verify(r, s.expected_answer, **s.metadata)).reward)
            out.append({"prompt": s.prompt, "expected": s.expected_answer, "system": s.system,
                        "rewards": scores})
        return out

    return {"name": env.name, "items": asyncio.run(main())}


@pytest.mark.parametrize(("path", "name"), [(CAPITALS, "nemo_style_capitals"),
                                            (ARITH, "nemo_style_arith"),
                                            (HOOKS, "nemo_style_planets"),
                                            (HOOKS, "nemo_style_sums")])
def test_files_load_in_the_real_peer_and_score_alike(path: Path, name: str) -> None:
    """The same file, in NeMo Evaluator 0.3.0's Python and in nel: same seeds, same rewards."""
    peer_python = peer_nemo_bin().parent / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")}
    proc = subprocess.run([str(peer_python), "-c", PEER_SCRIPT, str(path), name,
                           json.dumps(PROBES[name])], capture_output=True, text=True,
                          cwd=FILES, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peer = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = _nel_view(path, name, PROBES[name])
    assert peer["name"] == ours["name"] == name
    assert len(ours["items"]) == len(peer["items"]) >= 3
    for mine, theirs in zip(ours["items"], peer["items"], strict=True):
        assert mine["prompt"] == theirs["prompt"]
        assert mine["expected"] == theirs["expected"]
        assert mine["system"] == theirs["system"]
        assert mine["rewards"] == theirs["rewards"], (mine, theirs)
    # The probes are not all one verdict (the comparison could not pass by accident).
    assert {x for it in ours["items"] for x in it["rewards"]} == {0.0, 1.0}


def test_a_seed_fn_system_prompt_is_sent_once(tmp_path: Path, reference_server, server_stats) -> None:
    """A `seed_fn` that gives its system prompt both as `system=` and as the first message
    (the BYOB tutorial's example) sends it once, as NeMo Evaluator does."""
    url = reference_server(answers=[{"match": "Add", "content": "It is 7."}])
    proc = run_nel("eval", "run", str(_config(tmp_path, url, HOOKS, "nemo_style_sums")), "--json",
                   "--no-progress")
    (res,) = summary_json(proc)["results"]
    assert res["n_samples"] == 3 and res["score"] == pytest.approx(1 / 3)
    stats = server_stats(url)
    assert stats["system_messages"] == {"count": 3, "last": "You are a math tutor."}
    assert [m["role"] for m in stats["last_request"]["messages"]] == ["system", "user"]


def _nel_rewards(out: Path, bench: str) -> dict[int, float]:
    results = out / bench / "results.jsonl"  # NeMo Evaluator's layout, as the peer's
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    return {r["problem_idx"]: r["reward"] for r in rows}


def _peer_rewards(out: Path, bench: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / bench / "results.jsonl").read_text().splitlines()
            if line.strip()]
    return {r["problem_idx"]: r["reward"] for r in rows}


def _config(tmp_path: Path, url: str, module: Path, bench: str) -> Path:
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"services:\n  m:\n    url: {url}\n    model: m\nbenchmarks:\n"
                   f"  - name: {bench}\n    module: {module}\noutput:\n  dir: {tmp_path / 'out'}\n")
    return cfg


@pytest.mark.parametrize(("module", "bench", "answers", "expected"), [
    (CAPITALS, "nemo_style_capitals", CAPITAL_ANSWERS, CAPITAL_REWARDS),
    (ARITH, "nemo_style_arith", ARITH_ANSWERS, ARITH_REWARDS),
])
def test_eval_run_scores_a_nemo_file_like_the_peer(tmp_path: Path, reference_server, server_stats,
                                                   module: Path, bench: str,
                                                   answers: list[dict[str, str]],
                                                   expected: dict[int, float]) -> None:
    """`nel eval run` with the file as a config's `module:`; the peer's `nel eval run --bench
    file.py` on the same server: the same reward for every item.

    The EvalEnvironment file is the API reference's shape (no `protocol` parameter): it
    used to stop with "bad params {'protocol': 'chat'}".
    """
    url = reference_server(answers=answers)
    proc = run_nel("eval", "run", str(_config(tmp_path, url, module, bench)), "--json", "--no-progress")
    (res,) = summary_json(proc)["results"]
    assert res["n_samples"] == len(expected)
    assert res["score"] == pytest.approx(sum(expected.values()) / len(expected))
    assert _nel_rewards(tmp_path / "out", bench) == expected
    assert server_stats(url)["by_endpoint"]["/v1/chat/completions"] == len(expected)

    peer_out = tmp_path / "peer_out"
    ref = f"./{module.name}" if module == CAPITALS else f"./{module.name}:{bench}"
    peer = run_peer_nemo("eval", "run", "--bench", ref, "--model-url", url, "--model-id", "m",
                         "-o", str(peer_out), cwd=FILES)
    assert peer.returncode == 0, peer.stdout[-3000:] + peer.stderr[-3000:]
    assert _peer_rewards(peer_out, bench) == expected


@pytest.fixture(scope="module")
def served_capitals() -> Iterator[int]:
    """`nel serve -b <file.py>`: the file path as the benchmark name, as in NeMo Evaluator."""
    def make(port: int) -> ManagedProcess:
        return ManagedProcess([sys.executable, "-m", "dagster_project.cli.main", "serve", "-b",
                               str(CAPITALS), "--port", str(port), "--host", "127.0.0.1"],
                              cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT)}, name="nel-serve")

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health",
                                    timeout=PROCESS_START_S)
    try:
        yield port
    finally:
        proc.stop()


def test_nel_serve_serves_a_nemo_file(served_capitals: int) -> None:
    base = f"http://127.0.0.1:{served_capitals}"
    status, _, health = http_json("GET", f"{base}/health")
    assert status == 200 and health["benchmark"] == "nemo_style_capitals"
    assert health["dataset_size"] == 4
    status, _, seed = http_json("POST", f"{base}/seed_session", {"idx": 1})
    assert status == 200, seed
    assert "capital of Japan" in seed["prompt"] and seed["expected_answer"] == "Tokyo"
    assert seed["system"] == "You are a geography quiz."
    verdicts = []
    for response in ("Answer: Tokyo", "Answer: Kyoto", "Tokyo"):
        status, _, v = http_json("POST", f"{base}/verify", {
            "response": response, "expected": "Tokyo", "metadata": seed["metadata"]})
        assert status == 200, v
        verdicts.append(v["reward"])
    assert verdicts == [1.0, 0.0, 1.0]


def test_nel_validate_accepts_a_nemo_file() -> None:
    proc = run_nel("validate", "-b", str(CAPITALS))
    assert proc.returncode == 0, proc.stderr
    assert "4 problems" in proc.stdout and "4/4" in proc.stdout, proc.stdout


def test_a_file_with_two_benchmarks_needs_a_name() -> None:
    proc = run_nel("validate", "-b", str(ARITH))
    assert proc.returncode == 2
    assert "registers 2 benchmarks" in proc.stderr and f"{ARITH}:<name>" in proc.stderr
    assert "Traceback" not in proc.stderr
    # The BYOB tutorial's subclass has no __len__: the base class counts `_dataset`.
    assert len(get_benchmark(f"{ARITH}:nemo_style_echo")) == 2


def test_environment_base_class_contract() -> None:
    """NeMo Evaluator's base class: no-argument `__init__`, `_dataset` counted by `len`,
    the registry name given to a class that sets none; and a class with neither
    `__len__` nor `_dataset` is told so instead of evaluating zero problems."""
    from benchmarks import EvalEnvironment, SeedResult, VerifyResult, register

    @register("nemo_style_unnamed")
    class Unnamed(EvalEnvironment):
        def __init__(self) -> None:
            super().__init__()
            self._dataset = [{"q": "a"}, {"q": "b"}, {"q": "c"}]

        async def seed(self, idx: int) -> SeedResult:
            return SeedResult(self._dataset[idx]["q"], "x")

        async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
            return VerifyResult(0.0)

    env = get_benchmark("nemo_style_unnamed", hints={"protocol": "chat", "num_fewshot": 2})
    assert env.name == "nemo_style_unnamed" and len(env) == 3
    assert asyncio.run(env.dataset_size()) == 3 and env.dataset[1] == {"q": "b"}

    class Hollow(EvalEnvironment):
        def __init__(self) -> None:  # forgets super().__init__()
            pass

        async def seed(self, idx: int) -> SeedResult:
            raise AssertionError

        async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
            raise AssertionError

    with pytest.raises(TypeError, match="defines neither __len__ nor a _dataset"):
        len(Hollow())


@pytest.mark.parametrize(("line", "says"), [
    ("from nemo_evaluator import image_builder", "image_builder: sandbox image builds"),
    ("from nemo_evaluator.solvers import OpenClawSolver",
     "OpenClawSolver: nel runs this solver from the config, not as NeMo Evaluator's Python class: "
     "set `solver: {type: openclaw, ...}`"),
    ("from nemo_evaluator.solvers import HarborSolver", "set `solver: {type: harbor, ...}`"),
    ("from nemo_evaluator.solvers import ReActSolver", "set `solver: {type: tool_calling, ...}`"),
    ("from nemo_evaluator.solvers import OracleSolver", "OracleSolver: solvers other than"),
    ("import nemo_evaluator.sandbox", "nemo_evaluator.sandbox: NeMo Evaluator's sandbox classes"),
    ("from nemo_evaluator.scoring import get_scorer",
     "nemo_evaluator.scoring.get_scorer: nel does not provide 'get_scorer' (nemo_evaluator.scoring "
     "provides ScorerInput, answer_line"),
])
def test_names_nel_has_not_built_are_refused_in_one_line(tmp_path: Path, line: str, says: str) -> None:
    bench = tmp_path / "uses_later_feature.py"
    bench.write_text(f"from nemo_evaluator import benchmark, scorer\n{line}\n")
    proc = run_nel("validate", "-b", str(bench))
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{bench}:2:" in err and says in err, err


def test_nemo_import_paths_are_nels_modules() -> None:
    """Every documented path answers with nel's own object, importable both ways."""
    from benchmarks.nemo_imports import MODULES, install_nemo_imports

    install_nemo_imports()
    import importlib

    for mod_name, names in MODULES.items():
        mod = importlib.import_module(mod_name)
        for attr in names:
            assert getattr(mod, attr) is not None, f"{mod_name}.{attr}"
    import nemo_evaluator
    from nemo_evaluator.environments import EvalEnvironment, SeedResult, VerifyResult, register

    import benchmarks

    assert (EvalEnvironment, SeedResult, VerifyResult, register) == (
        benchmarks.EvalEnvironment, benchmarks.SeedResult, benchmarks.VerifyResult, benchmarks.register)
    assert nemo_evaluator.benchmark is benchmarks.byob.benchmark
    with pytest.raises(AttributeError, match="provides"):
        _ = nemo_evaluator.no_such_name


def test_helpers_take_the_peers_arguments() -> None:
    from benchmarks.byob import (
        ScorerInput,
        answer_line,
        fuzzy_match,
        multichoice_regex,
        numeric_match,
    )

    s = ScorerInput(response="Thinking: A or C?\nFinal: C", target="C")
    assert multichoice_regex(s, pattern=r"Final:\s*([A-D])")["correct"] is True
    assert multichoice_regex(ScorerInput("Answer: B", "B"))["correct"] is True
    assert answer_line(ScorerInput("Result = 12", "12"), pattern=r"Result = (\d+)")["extracted"] == "12"
    assert numeric_match(ScorerInput("so the total is 1,250 apples", "1250"))["correct"] is True
    # NeMo Evaluator 0.3.0 strips trailing zeros on both sides, so 10 == 1 there; not here.
    assert numeric_match(ScorerInput("10", "1"))["correct"] is False
    assert fuzzy_match(ScorerInput("It is Mount Everest", "x",
                                   metadata={"correct_answers": ["everest"]}))["correct"] is True
    assert fuzzy_match(ScorerInput("", "everest"))["correct"] is False
    with pytest.raises(NelError, match="not a valid regular expression"):
        answer_line(ScorerInput("x", "y"), pattern="(")


# A user's script, NeMo Evaluator style: `generate_app(env, gym_compat=True)` run by uvicorn.
APP_SCRIPT = r"""
import sys
from benchmarks.nemo_imports import install_nemo_imports
install_nemo_imports()
import uvicorn
from nemo_evaluator import get_environment
from nemo_evaluator.serving.app import generate_app
env = get_environment(sys.argv[1])
app = generate_app(env, gym_compat=True, data_export_dir=sys.argv[3])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def test_generate_app_serves_gym_compat_over_http(tmp_path: Path) -> None:
    export = tmp_path / "export"

    def make(port: int) -> ManagedProcess:
        return ManagedProcess([sys.executable, "-c", APP_SCRIPT, str(CAPITALS), str(port), str(export)],
                              cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT)}, name="generate-app")

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/health",
                                    timeout=PROCESS_START_S)
    try:
        base = f"http://127.0.0.1:{port}"
        _, _, health = http_json("GET", f"{base}/health")
        assert health["benchmark"] == "nemo_style_capitals" and health["protocol"] == "gym"
        assert health["gym_compat"] is True
        # NeMo Gym starts a session with the dataset row (no idx): accepted, answered {}.
        status, _, started = http_json("POST", f"{base}/seed_session", {"country": "Peru"})
        assert (status, started) == (200, {})
        status, _, seed = http_json("POST", f"{base}/seed_session", {"idx": 3})
        assert status == 200 and seed["expected_answer"] == "Lima"
        # The Gym form of /verify: a Responses-API object and the row's expected answer.
        body = {"responses_create_params": {"input": [{"role": "user", "content": seed["prompt"]}]},
                "response": {"output": [{"type": "message", "content": [
                    {"type": "output_text", "text": "Lima it is.\nAnswer: Lima"}]}]},
                "expected_answer": "Lima"}
        status, _, out = http_json("POST", f"{base}/verify", body)
        assert status == 200 and out["reward"] == 1.0, out
        body["response"]["output"][0]["content"][0]["text"] = "Answer: Cusco"
        assert http_json("POST", f"{base}/verify", body)[2]["reward"] == 0.0
    finally:
        proc.stop()
    rows = (export / "nemo_style_capitals.jsonl").read_text().splitlines()
    assert len(rows) == 4 and "Kenya" in rows[2]
