"""`nel compare` (paired comparison of two runs) and `nel gate` (GO / NO-GO release gate).

Same flags, defaults and exit statuses as NeMo Evaluator 0.3.0's commands, next to nel's
own (``--baseline-model``, ``--alpha``, ``--seed``, ``-v``): both are strict by default and
exit as ``dagster_project.exit_codes`` says (compare: BLOCK 1, WARN/INCONCLUSIVE 2; gate:
NO-GO 1, INCONCLUSIVE 2; ``--no-strict`` always exits 0 after a verdict).

Thresholds are in **score units**: scores are per-item means on a 0–1 scale, so
``--max-drop 0.01`` tolerates a drop of one point of accuracy. A value above 1 is refused
with a hint (it was almost certainly written in points).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dagster_project.exit_codes import COMPARE_EXIT, GATE_EXIT

_UNITS = ("thresholds are in score units: scores are 0–1 per-item means, so 0.01 = one "
          "point of accuracy (values above 1 are refused)")
_FORMATS = ["json", "markdown", "text"]  # NeMo Evaluator's renderers
_TESTS = ["auto", "mcnemar", "sign", "permutation"]
_ALL_FLIPS = 1_000_000  # --show-flips keeps every flipped item, not a few examples


def _add_strict(p: argparse.ArgumentParser, text: str) -> None:
    # one destination, the last flag wins (as click's --strict/--no-strict pair)
    p.add_argument("--strict", dest="strict", action="store_true", default=True,
                   help=text + " (the default)")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="exit 0 whatever the verdict (informational step)")


def _add_report(p: argparse.ArgumentParser, default: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--report", dest="report_path", metavar="PATH",
                   help=f"write the Markdown report to PATH (default: {default})")
    g.add_argument("--no-report", action="store_true", help="write no Markdown report")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `compare` and `gate`."""
    cmp_ = sub.add_parser(
        "compare", help="paired comparison of a candidate run against a baseline",
        description="Compare two runs on the items they share, per benchmark: delta, paired "
        "SE and CI, correlation, exact McNemar (0/1 scores) or a sign-flip permutation test, "
        "flips with examples, per-category deltas, runtime deltas and the minimum detectable "
        "effect at 80% power, and NeMo Evaluator 0.3.0's verdict by its rules: PASS (no item "
        "crossed --correct-above), BLOCK (its one-sided test significant, effect above --max-drop, "
        "more regressions than improvements), WARN (significant otherwise), INCONCLUSIVE "
        "(not significant and underpowered: 2.8/sqrt(discordant) > 2*MAX_DROP), else PASS. BASELINE and CANDIDATE are nel output dirs, nel bundle.json "
        "files, or NeMo Evaluator 0.3.0 output: eval-*.json files (with results.jsonl next to "
        "them), their run or benchmark directories, or a shard_N/ layout. " + _UNITS + ". Exit status (strict, the default): 0 PASS, "
        "1 BLOCK, 2 WARN or INCONCLUSIVE (2 is also a usage error).",
    )
    cmp_.add_argument("baseline", help="baseline run (dir or file)")
    cmp_.add_argument("candidate", help="candidate run (dir or file)")
    cmp_.add_argument("--baseline-model", help="model of the baseline dir (when it holds several)")
    cmp_.add_argument("--candidate-model", help="model of the candidate dir (when it holds several)")
    cmp_.add_argument("-t", "--max-drop", type=float, default=0.05,
                      help="practical threshold in score units (default 0.05 = 5 points): BLOCK "
                      "needs a significant effect above it")
    cmp_.add_argument("--correct-above", type=float, default=0.0, metavar="SCORE",
                      help="an item counts as correct when its score is above SCORE, for flips and "
                      "a forced McNemar test (default 0: any credit; 0.5 for judge scores)")
    cmp_.add_argument("--test", choices=_TESTS, default="auto",
                      help="paired test: auto (McNemar for 0/1 scores, else permutation), mcnemar, "
                      "sign or permutation (default auto)")
    cmp_.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    cmp_.add_argument("--seed", type=int, default=0, help="permutation-test seed")
    _add_strict(cmp_, "exit 1 on BLOCK, 2 on WARN or INCONCLUSIVE")
    cmp_.add_argument("-o", "--output", help="write regression.json here (a file or a directory)")
    cmp_.add_argument("--format", choices=_FORMATS, default="text", help="stdout format (default text)")
    cmp_.add_argument("--compact", action="store_true", help="a few lines (chat, CI logs)")
    cmp_.add_argument("--show-flips", action="store_true",
                      help="list every item that flipped, with its texts")
    cmp_.add_argument("--side-by-side", metavar="PATH", dest="side_by_side",
                      help="also write a self-contained HTML page of the items that flipped "
                      "(both answers, expected and extracted answers, prompt; filterable by "
                      "category and direction) to PATH; nel output dirs only")
    cmp_.add_argument("--side-by-side-limit", metavar="N", type=int, default=2000,
                      help="flips listed per direction and benchmark on that page (all are "
                      "counted; default 2000)")
    _add_report(cmp_, "regression_report.md next to each candidate eval-*.json, or in the "
                "candidate's nel output dir")
    cmp_.add_argument("-v", "--verbose", action="store_true",
                      help="every category and flip example texts")
    cmp_.set_defaults(func=_cmd_compare)

    gate = sub.add_parser(
        "gate", help="GO / NO-GO / INCONCLUSIVE release gate from a policy file",
        description="Apply a gate policy (NeMo Evaluator format: version: 1, defaults, "
        "per-benchmark tier critical|supporting|advisory, max_drop, max_relative_drop, "
        "relative_guard_below, metric mean_reward|pass@1, direction) to CANDIDATE against "
        "BASELINE, by NeMo Evaluator 0.3.0's rules: per benchmark BREACH (relative drop, or the "
        "95% CI of the paired damage above max_drop), PASS (CI within it) or INSUFFICIENT_EVIDENCE "
        "(CI straddles it, or fewer than 10 paired problems); NO-GO on any critical or supporting "
        "BREACH or missing required benchmark, INCONCLUSIVE on any INSUFFICIENT_EVIDENCE, else GO. "
        "nel's paired analysis (Newcombe CI, Bonferroni, MDE) is shown beside it (-v). "
        + _UNITS + ". Exit status (strict, the default): 0 GO, 1 NO-GO, 2 INCONCLUSIVE "
        "(2 is also a usage error); --no-strict exits 0.",
    )
    gate.add_argument("baseline", help="baseline run (dir or file)")
    gate.add_argument("candidate", help="candidate run (dir or file)")
    gate.add_argument("-p", "--policy", required=True, help="gate policy YAML (see deploy/policies/)")
    gate.add_argument("--baseline-model", help="model of the baseline dir (when it holds several)")
    gate.add_argument("--candidate-model", help="model of the candidate dir (when it holds several)")
    gate.add_argument("--format", choices=_FORMATS, default="text", help="stdout format (default text)")
    gate.add_argument("-o", "--output", help="write the decision JSON here (regression.json "
                      "with a `gate` section when a directory is given)")
    _add_strict(gate, "exit 1 on NO-GO, 2 on INCONCLUSIVE")
    _add_report(gate, "OUTPUT with .md when -o names a file, gate_report.md inside it when a directory; "
                "none without -o")
    gate.add_argument("-v", "--verbose", action="store_true", help="CIs, thresholds and MDE per benchmark")
    gate.add_argument("--seed", type=int, default=0, help="permutation-test seed")
    gate.set_defaults(func=_cmd_gate)


def _load_pair(args: argparse.Namespace) -> tuple[Any, Any]:
    from nel_assets.engine.results.runs import load_run

    base = load_run(args.baseline, model=args.baseline_model, flag="--baseline-model")
    cand = load_run(args.candidate, model=args.candidate_model, flag="--candidate-model")
    return base, cand


def _report_paths(doc: dict[str, Any], cand: Any, report_path: str | None) -> list[tuple[Path, dict[str, Any]]]:
    """Where `compare` writes Markdown, and the document each file gets.

    As NeMo Evaluator: a given PATH gets the whole comparison; by default each benchmark read
    from an eval-*.json gets ``regression_report.md`` next to it. A nel output dir gets one
    ``regression_report.md`` at its top (a bundle.json: in the output dir around it).
    """
    if report_path:
        return [(Path(report_path), doc)]
    if cand.kind == "nemo":
        return [(Path(cand.benchmarks[name].source) / "regression_report.md",
                 {**doc, "benchmarks": {name: comp}, "outcome": comp["outcome"]})
                for name, comp in doc["benchmarks"].items()]
    root = Path(cand.source)
    if root.is_file():  # <out>/<bench>/bundle/model=<m>/bundle.json
        root = root.parents[3]
    return [(root / "regression_report.md", doc)]


def _cmd_compare(args: argparse.Namespace) -> int:
    from nel_assets.engine.reports.compare_text import (
        format_compact,
        format_comparison,
        format_flips,
    )
    from nel_assets.engine.reports.verdict_markdown import comparison_markdown
    from nel_assets.engine.results.runs import check_drop_units, compare_runs, write_regression
    from nel_resources.storage.store import write_text_atomic

    check_drop_units(args.max_drop, "--max-drop")
    base, cand = _load_pair(args)
    doc = compare_runs(base, cand, max_drop=args.max_drop, alpha=args.alpha, seed=args.seed,
                       test=args.test, correct_above=args.correct_above,
                       **({"n_examples": _ALL_FLIPS} if args.show_flips else {}))
    if not doc["benchmarks"]:
        from benchmarks.errors import NelError

        raise NelError(f"no benchmark in common: baseline has {', '.join(sorted(base.benchmarks)) or 'none'}, "
                       f"candidate has {', '.join(sorted(cand.benchmarks)) or 'none'}")
    for side, names in doc["missing"].items():
        other = "candidate" if side == "baseline" else "baseline"
        if names:
            print(f"warning: {other}-only benchmarks (no {side}): {', '.join(names)}", file=sys.stderr)
    for line in doc["provenance_warnings"]:  # a verdict about another evaluation says so
        print(line, file=sys.stderr)
    if args.output:
        path = write_regression(args.output, doc)
        print(f"wrote {path}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
    elif args.format == "markdown":
        print(comparison_markdown(doc, show_flips=args.show_flips), end="")
    elif args.compact:
        print(format_compact(doc))
    else:
        print(format_comparison(doc, verbose=args.verbose))
    if args.show_flips and args.format == "text":
        print(format_flips(doc))
    if args.side_by_side:
        _write_side_by_side(args, base, cand)
    if not args.no_report:
        for path, part in _report_paths(doc, cand, args.report_path):
            write_text_atomic(path, comparison_markdown(part, show_flips=args.show_flips))
            print(f"wrote {path}", file=sys.stderr)
    return COMPARE_EXIT[doc["outcome"]] if args.strict else 0


def _write_side_by_side(args: argparse.Namespace, base: Any, cand: Any) -> None:
    """The flipped items' page (`--side-by-side`), pass/fail by `--correct-above` as the flips above."""
    from benchmarks.errors import NelError
    from nel_assets.engine.reports.side_by_side import run_pairs, write_side_by_side

    if args.side_by_side_limit < 0:
        raise NelError(f"--side-by-side-limit {args.side_by_side_limit}: give a count >= 0")
    flips = write_side_by_side(Path(args.side_by_side), run_pairs(base, cand), baseline=base.model,
                               candidate=cand.model, threshold=args.correct_above,
                               limit=args.side_by_side_limit)
    n = sum(sum(f.counts.values()) for f in flips)
    print(f"wrote {args.side_by_side} ({n} flipped items)", file=sys.stderr)


def gate_policy_or_error(path: str) -> Any:
    """Load a policy file; a NelError (one line, exit 2) for anything wrong with it."""
    from nel_assets.engine.results.runs import load_checked_policy

    return load_checked_policy(path)


def _cmd_gate(args: argparse.Namespace) -> int:
    from benchmarks.errors import NelError
    from nel_assets.engine.reports.gate_text import gate_text
    from nel_assets.engine.reports.verdict_markdown import gate_markdown
    from nel_assets.engine.results.runs import compare_runs, write_regression
    from nel_assets.engine.verdicts.gate import decide
    from nel_assets.engine.verdicts.nemo_gate_rules import gate_verdict, policy_errors
    from nel_resources.storage.store import write_json_atomic, write_text_atomic

    policy = gate_policy_or_error(args.policy)
    errors = policy_errors(policy)
    if errors:
        raise NelError(f"{args.policy}: invalid gate policy: " + "; ".join(errors))
    base, cand = _load_pair(args)
    # the verdict: NeMo Evaluator's rules on the same items; nel's paired analysis beside it
    verdict = gate_verdict(policy, base, cand)
    doc = compare_runs(base, cand, alpha=policy.alpha, seed=args.seed)
    nel = decide(policy, doc["benchmarks"], set(base.benchmarks), set(cand.benchmarks))
    decision = verdict["verdict"]
    out = {**verdict, "decision": decision, "exit_code": GATE_EXIT[decision],
           "policy": str(args.policy), "baseline": doc["baseline"], "candidate": doc["candidate"],
           "nel_analysis": nel.to_dict(), "provenance_warnings": doc["provenance_warnings"]}
    for line in doc["provenance_warnings"]:  # a verdict about another evaluation says so
        print(line, file=sys.stderr)
    report: Path | None = None
    if args.output:
        p = Path(args.output)
        if p.is_dir():  # a directory gets the full regression.json with the gate inside
            gate = {k: v for k, v in out.items() if k not in ("baseline", "candidate")}
            written = write_regression(p, {**doc, "gate": gate})
            report = p / "gate_report.md"
        else:
            write_json_atomic(p, out)
            written, report = p, p.with_suffix(".md")
        print(f"wrote {written}", file=sys.stderr)
    if args.format == "json":  # as NeMo Evaluator: JSON on stdout writes no automatic sidecar
        report = None
    if args.report_path:
        report = Path(args.report_path)
    if args.format == "json":
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
    elif args.format == "markdown":
        print(gate_markdown(out), end="")
    else:
        print(f"nel gate  baseline {base.model} ({base.source})  candidate {cand.model} ({cand.source})")
        print(f"policy {args.policy}")
        print(gate_text(out, verbose=args.verbose))
        if args.strict:
            print(f"exit status {GATE_EXIT[decision]} (strict: 0 GO, 1 NO-GO, 2 INCONCLUSIVE)")
    if report is not None and not args.no_report:
        write_text_atomic(report, gate_markdown(out))
        print(f"wrote {report}", file=sys.stderr)
    return GATE_EXIT[decision] if args.strict else 0
