"""`lm-eval://` against lm-eval itself: the same local task, data and llama.cpp server give
the same per-item answers and scores through nel and through `lm_eval --model
local-completions` (generate_until, and multiple_choice by log-likelihoods; the tasks read
through `include_path`).

lm-eval counts a context's tokens with a local Hugging Face tokenizer; stories260K's is
rebuilt from its GGUF (bench/support/gguf_tokenizer.py) and checked against the server's
own tokenization first. nel needs none: it finds the continuation by the echoed offsets.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"
FIXTURE = FIXTURES / "gsm8k_local.yaml.in"
N_ITEMS = 100
N_MC = 80  # 4 scoring requests each

if not os.environ.get("CI"):  # in CI the optional package is installed: a missing one fails
    pytest.importorskip("lm_eval")


def _write_task(tmp: Path, data_dir: Path) -> Path:
    data = tmp / "data"
    data.mkdir()
    for split, n in (("test", N_ITEMS), ("train", 10)):
        lines = (data_dir / "gsm8k" / f"{split}.jsonl").read_text().splitlines()[:n]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text(FIXTURE.read_text().replace("${DATA}", str(data)))
    return tasks


def _offline_env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def test_generate_until_agrees_with_lm_eval(llama_server: str, data_dir: Path,
                                            tmp_path: Path) -> None:
    tasks = _write_task(tmp_path, data_dir)
    bindir = Path(sys.executable).parent
    # lm-eval itself, on the same server and task files
    out = tmp_path / "lm_eval_out"
    subprocess.run(
        [str(bindir / "lm_eval"), "--model", "local-completions", "--model_args",
         f"base_url={llama_server}/completions,model=stories260K,tokenizer_backend=None,"
         "tokenized_requests=False,num_concurrent=1", "--tasks", "gsm8k_local",
         "--include_path", str(tasks), "--log_samples", "--output_path", str(out)],
        check=True, env=_offline_env(), capture_output=True, timeout=600)
    theirs: dict[tuple[int, str], dict] = {}
    for f in out.rglob("samples_gsm8k_local_*.jsonl"):
        for line in f.read_text().splitlines():
            s = json.loads(line)
            theirs[(s["doc_id"], s["filter"])] = s
    ours = _run_nel(tmp_path, llama_server, "gsm8k_local", tasks)  # nel: CLI and engine
    assert len(ours) == N_ITEMS and len(theirs) == 2 * N_ITEMS
    same_text = same_score = 0
    for row in ours:
        doc = row["metadata"]["doc_id"]
        lm = theirs[(doc, "strict-match")]
        # nel strips the answer's surrounding whitespace; lm-eval keeps the leading space
        same_text += row["model_response"].strip() == lm["resps"][0][0].strip()
        metrics = row["scoring_details"]["metrics"]
        same_score += all(metrics[f"exact_match,{flt}"] == theirs[(doc, flt)]["exact_match"]
                          for flt in ("strict-match", "flexible-extract"))
    assert same_text / N_ITEMS >= 0.995, f"{same_text}/{N_ITEMS} responses agree"
    assert same_score / N_ITEMS >= 0.995, f"{same_score}/{N_ITEMS} scores agree"
    # the engine's staleness holds for lm-eval tasks: an unchanged rerun sends nothing
    again = _nel_eval(tmp_path / "gsm8k_local.yaml")
    assert again.returncode == 0 and "up to date 1, requests 0" in again.stdout, again.stdout


def _nel_eval(cfg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "nel"), "eval", "run", str(cfg),
                           "--no-progress"], env=_offline_env(), capture_output=True, text=True,
                          timeout=600)


def _run_nel(tmp: Path, server: str, task: str, tasks: Path,
             params: dict | None = None) -> list[dict]:
    cfg = tmp / f"{task}.yaml"
    cfg.write_text(json.dumps({
        "services": {"llama": {"type": "api", "url": server, "protocol": "completions",
                               "model": "stories260K"}},
        "benchmarks": [{"name": f"lm-eval://{task}", "params": {"include_path": str(tasks),
                                                              **(params or {})}}],
        "output": {"dir": str(tmp / f"nel_{task}")}}))
    run = _nel_eval(cfg)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    path = tmp / f"nel_{task}" / f"lm_eval_{task}" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _mmlu_task(tmp: Path, data_dir: Path) -> Path:
    import csv

    rows = []
    for subject in ("abstract_algebra", "anatomy"):
        with (data_dir / "mmlu" / "test" / f"{subject}_test.csv").open(encoding="utf-8") as f:
            rows += [{"question": r[0], "subject": subject, "choices": r[1:5],
                      "answer": "ABCD".index(r[5].strip())} for r in csv.reader(f)][:N_MC // 2]
    data = tmp / "mmlu_data"
    data.mkdir()
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp / "mmlu_tasks"
    tasks.mkdir()
    (tasks / "mmlu_local.yaml").write_text(
        (FIXTURES / "mmlu_local.yaml.in").read_text().replace("${DATA}", str(data)))
    return tasks


def test_multiple_choice_agrees_with_lm_eval(llama_server: str, data_dir: Path,
                                             tmp_path: Path) -> None:
    import urllib.request

    from bench.support.gguf_tokenizer import write_hf_tokenizer
    from tests.support.realcomponents import llama_model_path

    tok_dir = write_hf_tokenizer(llama_model_path(), tmp_path / "tokenizer")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    root = llama_server.removesuffix("/v1")
    for text in ("Once upon a time", "Which of the following?\nA. 0\nB. 4\nAnswer: B"):
        req = urllib.request.Request(f"{root}/extras/tokenize", method="POST",
                                     data=json.dumps({"input": text}).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            served = json.loads(resp.read())["tokens"]
        assert tok(text, add_special_tokens=False).input_ids == served[1:]  # after BOS

    tasks = _mmlu_task(tmp_path, data_dir)
    out = tmp_path / "lm_eval_mc"
    subprocess.run(
        [str(Path(sys.executable).parent / "lm_eval"), "--model", "local-completions",
         "--model_args", f"base_url={llama_server}/completions,model=stories260K,"
         f"tokenizer_backend=huggingface,tokenizer={tok_dir},tokenized_requests=False,"
         "num_concurrent=1,max_length=512", "--tasks", "mmlu_local", "--include_path",
         str(tasks), "--log_samples", "--output_path", str(out)],
        check=True, env=_offline_env(), capture_output=True, timeout=600)
    theirs = {}
    for f in out.rglob("samples_mmlu_local_*.jsonl"):
        for line in f.read_text().splitlines():
            s = json.loads(line)
            theirs[s["doc_id"]] = s
    ours = _run_nel(tmp_path, llama_server, "mmlu_local", tasks)
    assert len(ours) == N_MC == len(theirs)
    same = 0
    for row in ours:
        lm = theirs[row["metadata"]["doc_id"]]
        metrics = row["scoring_details"]["metrics"]
        lls = [x["logprob"] for x in row["scoring_details"]["loglikelihoods"]]
        same += (metrics["acc,none"] == lm["acc"] and metrics["acc_norm,none"] == lm["acc_norm"]
                 and all(abs(a - float(b[0][0])) < 1e-6 for a, b in zip(lls, lm["resps"],
                                                                         strict=True)))
    assert same / N_MC >= 0.995, f"{same}/{N_MC} items agree (acc, acc_norm, log-likelihoods)"


# Short stories (each well under the server's 512-token context: one window), varied so the
# documents' bits per byte differ; the first starts with a space, the last has a newline.
_STORY_PARTS = ("Once upon a time, there was a little girl named Lily.",
                "She loved to play outside in the park with her big red ball.",
                "One day, a small dog came to say hello.", "The sun was warm and bright.",
                "Tom and his mom went to the store to buy some milk.",
                "The cat jumped on the table and knocked over the cup.",
                "They were happy and played together all day.")


def _stories(n: int) -> list[str]:
    docs = []
    for i in range(n):
        parts = [_STORY_PARTS[(i + k) % len(_STORY_PARTS)] for k in range(1 + i % 5)]
        docs.append(" ".join(parts))
    docs[0] = " " + docs[0]
    docs[-1] = docs[-1] + "\nThe end."
    return docs


N_DOCS = 12


@pytest.mark.parametrize("max_length", [None, 48])
def test_bits_per_byte_agrees_with_lm_eval(llama_server: str, tmp_path: Path,
                                           max_length: int | None) -> None:
    """Rolling log-likelihood (perplexity) documents: nel with `rolling_prefix: "<s> "` sends
    what lm-eval sends with a llama tokenizer (`decode([bos] + tokens)`), so every
    document's bits per byte, and the corpus's, agree within 1e-3. With `max_length: 48`
    (lm-eval's model argument and nel's param) the documents of 14 to 104 tokens are cut
    into lm-eval's token windows (46 predicted tokens each) on both sides."""
    from bench.support.gguf_tokenizer import write_hf_tokenizer
    from tests.support.realcomponents import llama_model_path

    tok_dir = write_hf_tokenizer(llama_model_path(), tmp_path / "tokenizer")
    docs = _stories(N_DOCS)
    data = tmp_path / "ppl_data"
    data.mkdir()
    (data / "test.jsonl").write_text("".join(json.dumps({"page": d}) + "\n" for d in docs))
    tasks = tmp_path / "ppl_tasks"
    tasks.mkdir()
    (tasks / "wikitext_local.yaml").write_text(
        (FIXTURES / "wikitext_local.yaml.in").read_text().replace("${DATA}", str(data)))
    out = tmp_path / "lm_eval_ppl"
    subprocess.run(
        [str(Path(sys.executable).parent / "lm_eval"), "--model", "local-completions",
         "--model_args", f"base_url={llama_server}/completions,model=stories260K,"
         f"tokenizer_backend=huggingface,tokenizer={tok_dir},tokenized_requests=False,"
         "num_concurrent=1" + (f",max_length={max_length}" if max_length else ""),
         "--tasks", "wikitext_local", "--include_path", str(tasks),
         "--log_samples", "--output_path", str(out)],
        check=True, env=_offline_env(), capture_output=True, timeout=600)
    theirs = {}
    for f in out.rglob("samples_wikitext_local_*.jsonl"):
        for line in f.read_text().splitlines():
            s = json.loads(line)
            ll, n_bytes = s["bits_per_byte"]
            theirs[s["doc_id"]] = (ll, n_bytes)
    params: dict = {"rolling_prefix": "<s> "}
    if max_length:
        params["max_length"] = max_length
    ours = _run_nel(tmp_path, llama_server, "wikitext_local", tasks, params)
    assert len(ours) == N_DOCS == len(theirs)
    ll_ours = ll_theirs = bytes_total = 0.0
    for row in ours:
        ll, n_bytes = theirs[row["metadata"]["doc_id"]]
        [scored] = row["scoring_details"]["loglikelihoods"]
        assert scored["n_bytes"] == n_bytes
        bpb_theirs = -ll / n_bytes / math.log(2)
        bpb_ours = row["scoring_details"]["metrics"]["bits_per_byte,none"]
        assert abs(bpb_ours - bpb_theirs) < 1e-3, (row["metadata"]["doc_id"], bpb_ours,
                                                   bpb_theirs)
        ll_ours += scored["logprob"]
        ll_theirs += ll
        bytes_total += n_bytes
    assert abs(ll_ours - ll_theirs) / bytes_total / math.log(2) < 1e-3
