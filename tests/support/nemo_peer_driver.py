"""Run inside NeMo Evaluator 0.3.0's own venv (never imports nel): writes result directories
with the peer's own bundle writer, and runs its real CLI commands in one interpreter.

    python nemo_peer_driver.py < job.json > answer.json

``job``: ``{"write": [{"dir", "benchmark", "model", "rows": [[problem_idx, repeat, reward,
category|null], ...]}], "datasets": {benchmark: rows.jsonl}, "run": [{"id", "args": [...]}]}``. Answer: ``{"run": {id: {"exit_code",
"output"}}}``. ``write`` goes first, through ``headline_score_metrics``,
``build_artifact_bundle`` and ``write_all`` (what its ``eval run`` calls), so each bundle's
scores and CIs are the peer's own. ``run`` invokes its click group (``nemo_evaluator.cli.main``)
as its ``nel`` executable does: same parsing, same ``sys.exit`` statuses. ``datasets`` gives a
built-in benchmark (``nemo_evaluator.benchmarks``) its rows from a local JSONL file, in the
form its own loader returns them (hub rows, or what its loader function builds), since the
hub is out of reach here: everything after loading (its ``prepare_row``/``seed_fn``, prompt,
solver, client) is the peer's own code path. ``bootstrap_resamples`` (optional) lowers the
resamples of the peer's bootstrap CIs, for a job that reads no CI (``fewer_resamples``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def write(spec: dict) -> None:
    from nemo_evaluator.engine.artifacts import build_artifact_bundle, write_all
    from nemo_evaluator.metrics.headline import headline_score_metrics

    per_problem: dict[int, list[float]] = defaultdict(list)
    results = []
    for pid, rep, reward, cat in spec["rows"]:
        per_problem[pid].append(float(reward))
        rec = {"problem_idx": pid, "repeat": rep, "reward": float(reward), "expected_answer": str(pid),
               "model_response": f"Answer: {pid}", "extracted_answer": str(pid)}
        if cat is not None:
            rec["metadata"] = {"category": cat}
        results.append(rec)
    repeats = max(len(v) for v in per_problem.values())
    metrics = dict(headline_score_metrics(per_problem, repeats))
    config = {"benchmark": spec["benchmark"], "model": spec["model"], "repeats": repeats}
    bundle = build_artifact_bundle(spec["benchmark"], results, metrics, config)
    bundle["_results"] = results
    write_all(bundle, Path(spec["dir"]))


def use_local_rows(datasets: dict[str, str]) -> None:
    """Point each named built-in's dataset at the rows of a local JSONL file."""
    import nemo_evaluator.benchmarks  # noqa: F401  (registers the built-ins)
    from nemo_evaluator.environments.custom import _BYOB_REGISTRY

    for name, path in datasets.items():
        rows = [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").split("\n") if ln.strip()]
        # The registered environment class holds this definition object: its loader now
        # returns the rows (a fresh copy each time: prepare_row may mutate them).
        _BYOB_REGISTRY[name].dataset = lambda rows=rows: json.loads(json.dumps(rows))


def fewer_resamples(n: int) -> None:
    """Make the peer's bootstrap CIs draw `n` resamples instead of 10,000.

    0.3.0 bootstraps a CI for every category of every run in a Python loop (10,000 draws
    each, after all requests): for a caller that reads only what was sent, not the CIs, that
    was half of the run. Every caller of `bootstrap_ci` shares the one function object, so
    its default is changed in place.
    """
    from nemo_evaluator.metrics.confidence import bootstrap_ci

    defaults = list(bootstrap_ci.__defaults__ or ())
    names = bootstrap_ci.__code__.co_varnames[:bootstrap_ci.__code__.co_argcount]
    defaults[names[-len(defaults):].index("n_bootstrap")] = n
    bootstrap_ci.__defaults__ = tuple(defaults)


def run(args: list[str]) -> dict:
    from click.testing import CliRunner
    from nemo_evaluator.cli.main import cli

    res = CliRunner().invoke(cli, args, catch_exceptions=True)
    out = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        out += f"\nEXCEPTION: {type(res.exception).__name__}: {res.exception}"
    return {"exit_code": res.exit_code, "output": out}


def main() -> None:
    job = json.load(sys.stdin)
    for spec in job.get("write", []):
        write(spec)
    use_local_rows(job.get("datasets", {}))
    if job.get("bootstrap_resamples"):  # only for a job that reads no CI (prompt parity)
        fewer_resamples(int(job["bootstrap_resamples"]))
    answer = {"run": {item["id"]: run(item["args"]) for item in job.get("run", [])}}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
