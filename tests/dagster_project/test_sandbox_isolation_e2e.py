"""The drills' holes, end to end through a real `nel eval run` with a docker sandbox named in
the config (the entry point that gave containers `bridge`): model-written code cannot reach a
listener on this host, and an answer that exits 0 before its tests scores 0. The model is
the reference server answering HumanEval prompts with those programs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from benchmarks.builtin.humaneval import HumanEval
from nel_resources.reference_server import start_reference_server
from tests.support.cli import run_nel, summary_json
from tests.support.code_attacks import attack_answer
from tests.support.docker_engine import BASE_IMAGE
from tests.support.gateway_listener import gateway_listener


def test_eval_run_docker_sandbox_has_no_network_and_early_exit_scores_0(
        tmp_path: Path, humaneval: HumanEval, docker_host: str, data_dir: Path) -> None:
    row = humaneval.rows[0]
    with gateway_listener() as lis:
        # problem 0: the right function, after trying to reach the host's listener
        reach = f"```python\n{lis.connect_code()}\n{row['prompt']}{row['canonical_solution']}```"
        answers = [{"match": humaneval.rows[0]["prompt"].strip()[-200:], "content": reach},
                   {"match": humaneval.rows[1]["prompt"].strip()[-200:],
                    "content": attack_answer("sys_exit", humaneval.rows[1]["entry_point"])}]
        proc, url = start_reference_server(answers=answers)
        try:
            out = tmp_path / "out"
            cfg = {"services": {"ref": {"type": "api", "url": f"{url}/chat/completions",
                                        "protocol": "chat_completions", "model": "ref"}},
                   "sandboxes": {"code": {"type": "docker", "image": BASE_IMAGE, "concurrency": 1}},
                   "benchmarks": [{"name": "humaneval", "max_problems": 2, "sandbox": "code",
                                   "solver": {"type": "simple", "service": "ref"}}],
                   "output": {"dir": str(out)}}
            path = tmp_path / "nel.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            s = summary_json(run_nel("eval", "run", str(path), "--json", "--no-progress",
                                     env={"NEL_DATA_DIR": str(data_dir), "DOCKER_HOST": docker_host}))
        finally:
            proc.stop()
        assert not lis.seen, f"a sandbox reached the host's listener from {lis.seen}"
    (res,) = s["results"]
    rows = {r["problem_idx"]: r for r in (json.loads(x) for x in
            (Path(res["exports"]) / "trajectories.jsonl").read_text().splitlines())}
    # the connection attempt is in the answer that scores 1: the program did run
    assert rows[0]["reward"] == 1.0, rows[0]["scoring_details"]
    assert rows[1]["reward"] == 0.0, rows[1]["scoring_details"]
    assert rows[1]["scoring_details"]["reason"] == "tests_not_finished"
