"""A BYOB file is the benchmark it registers, under the name it registers, everywhere.

NeMo Evaluator's own built-ins are BYOB files; a team copies one (here its `gsm8k.py`, with a
local dataset and a prompt of its own) as a template. In nel that file must win over the
built-in of the same name and say so once, and a config's `name: ./gsm8k.py` must name the
benchmark `gsm8k`, so `nel compare` finds it in a NeMo Evaluator run of the same file.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo

PEER_GSM8K = '''import re

from nemo_evaluator.environments.custom import benchmark, scorer
from nemo_evaluator.scoring import ScorerInput, answer_line

_PROMPT = ("OURS Solve the following math problem step by step. "
           "Put your final numerical answer after 'The answer is'.\\n\\nProblem: {question}")


def _prepare(row, idx, rng):
    m = re.search(r"####\\s*(.+)", row.get("answer", ""))
    answer = m.group(1).strip().replace(",", "") if m else row.get("answer", "")
    return {**row, "answer": answer}


@benchmark(name="gsm8k", dataset="data.jsonl", prompt=_PROMPT, target_field="answer",
           prepare_row=_prepare)
@scorer
def gsm8k_scorer(sample: ScorerInput) -> dict:
    return answer_line(sample, pattern=r"(?i)(?:the answer is|answer\\s*:)\\s*([^\\n]+)")
'''
ANSWERS = [{"match": f"What is {i}+{i}?", "content": f"The answer is {2 * i if i % 2 else 0}"}
           for i in range(1, 7)]


def _setup(tmp_path: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    files.joinpath("gsm8k.py").write_text(PEER_GSM8K)
    files.joinpath("data.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i}+{i}?", "answer": f"so #### {2 * i}"}) + "\n"
        for i in range(1, 7)))
    return files


def test_a_file_named_like_a_builtin_runs_under_its_name_and_compares_with_the_peer(
        tmp_path: Path, reference_server) -> None:
    files = _setup(tmp_path)
    url = reference_server(answers=ANSWERS)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"services:\n  m: {{type: api, url: '{url}', model: m}}\n"
                   f"benchmarks:\n  - name: ./files/gsm8k.py\n    solver: {{service: m}}\n"
                   f"output: {{dir: {tmp_path / 'nel_out'}}}\n")
    proc = run_nel("eval", "run", str(cfg), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [ln for ln in proc.stderr.splitlines() if "replaces nel's built-in 'gsm8k'" in ln]
    assert len(notes) == 1, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "nel_out" / "gsm8k" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert all(r["prompt"].startswith("OURS Solve") for r in rows)  # the file's, not the built-in's
    assert sorted(r["reward"] for r in rows) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]

    peer = run_peer_nemo("eval", "run", "--bench", "./gsm8k.py", "--model-url", url,
                         "--model-id", "m", "-o", str(tmp_path / "peer_out"), cwd=files)
    assert peer.returncode == 0, peer.stdout[-3000:] + peer.stderr[-3000:]
    cmp = run_nel("compare", str(tmp_path / "peer_out"), str(tmp_path / "nel_out"), "--format", "json")
    assert "no benchmark in common" not in cmp.stdout + cmp.stderr
    assert cmp.returncode in (0, 2), cmp.stderr[-3000:]
    gsm = json.loads(cmp.stdout)["benchmarks"]["gsm8k"]
    # every item paired, and both tools scored each alike (same prompt, same answers)
    assert gsm["n_paired"] == 6 and gsm["delta"] == 0.0
    assert gsm["mcnemar"] == {"base_only_correct": 0, "cand_only_correct": 0}
