"""`nel eval report`, `nel report` (all benchmarks, one document) and `nel eval merge`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

_FORMATS = ["markdown", "html", "csv", "json", "latex"]


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output directory of a run")
    p.add_argument("-f", "--format", default=None, choices=_FORMATS,
                   help="markdown (default), html (self-contained, plots + per-sample drill-down), "
                   "csv, json, latex (a tabular fragment)")
    p.add_argument("--all-formats", action="store_true",
                   help="write every format (report.md/.html/.csv/.json/.tex) into -o DIR")
    p.add_argument("-o", "--output", help="file to write (a directory with --all-formats); default stdout")
    p.add_argument("-m", "--model", action="append", default=None,
                   help="only this model (repeatable; default all)")
    p.add_argument("-b", "--bench", action="append", default=None,
                   help="only this benchmark (repeatable; default all)")
    p.add_argument("--comparison", help="a regression.json (from `nel compare -o`) to include: "
                   "table and forest plot of the deltas")
    p.add_argument("--max-rows", type=int, default=None,
                   help="HTML drill-down rows per benchmark × model (default 1000; failed and "
                   "wrong samples first)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval report`, `eval merge` and `report`."""
    from dagster_project.cli.commands_eval import EVAL_SUBPARSERS

    assert EVAL_SUBPARSERS is not None, "commands_eval must register first"
    rep = EVAL_SUBPARSERS.add_parser("report", help="render a report from an output directory")
    _report_args(rep)
    rep.set_defaults(func=_cmd_report)

    top = sub.add_parser("report", help="one report across every benchmark and model of a run",
                         description="Like `nel eval report`, defaulting to the HTML report "
                         "across all benchmarks (plots, comparison, per-sample drill-down).")
    _report_args(top)
    top.set_defaults(func=_cmd_report, default_format="html")

    mg = EVAL_SUBPARSERS.add_parser(
        "merge", help="merge shard outputs and recompute global metrics",
        description="Combine the shard outputs of a distributed run (one dir, or several dirs "
        "written by separate shard processes), refuse duplicate samples, report missing shards "
        "and uncovered problem ranges, and rebuild every bundle from all rows. Exit status: 0 "
        "merged and complete; 1 incomplete (nothing merged unless --allow-partial); 2 errors "
        "such as duplicate samples.")
    mg.add_argument("dirs", nargs="+", metavar="DIR", help="output dir(s) holding shard results")
    mg.add_argument("-o", "--output", help="merged output dir (default: the first DIR)")
    mg.add_argument("--shards", type=int, default=None,
                    help="shards each benchmark should have (default: recorded or inferred from the dataset)")
    mg.add_argument("--allow-partial", action="store_true",
                    help="merge anyway when shards or problems are missing (bundles say complete: false)")
    mg.add_argument("--json", action="store_true", help="print the merge report as JSON")
    mg.set_defaults(func=_cmd_merge)


def _write(path: str | None, text: str) -> None:
    if path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        print(f"wrote {p}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _cmd_report(args: argparse.Namespace) -> int:
    import json

    from benchmarks.errors import NelError
    from nel_assets.engine.reports import EXTENSIONS, collect, render
    from nel_assets.engine.reports.html import MAX_ROWS
    from nel_resources.store import ResultStore, asset_name, slugify

    store = ResultStore(args.dir)
    if not store.root.exists():
        raise NelError(f"no such output directory: {store.root}")
    fmt = args.format or getattr(args, "default_format", "markdown")
    models = None if not args.model else [slugify(m) for m in args.model]
    benches = None if not args.bench else [asset_name(b) for b in args.bench]
    need_samples = args.all_formats or fmt == "html"
    bundles, details = collect(store, models=models, benchmarks=benches, with_samples=need_samples,
                               max_rows=args.max_rows or MAX_ROWS)
    if not bundles:
        raise NelError(f"no bundles under {store.root}: run `nel eval run` (or `nel eval merge`) first")
    comparison: dict[str, Any] | None = None
    if args.comparison:
        try:
            comparison = json.loads(Path(args.comparison).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise NelError(f"--comparison {args.comparison}: not a readable regression.json: {exc}") from None
        if not isinstance(comparison, dict) or "benchmarks" not in comparison:
            raise NelError(f"--comparison {args.comparison}: not a regression.json (no 'benchmarks')")
    if args.all_formats:
        if not args.output:
            raise NelError("--all-formats needs -o DIR (the directory to write report.* into)")
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for f in _FORMATS:
            _write(str(out / f"report.{EXTENSIONS[f]}"),
                   render(f, bundles, details=details, comparison=comparison))
        return 0
    _write(args.output, render(fmt, bundles, details=details, comparison=comparison))
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    import json

    from nel_assets.engine.merge import merge_outputs

    rep = merge_outputs(args.dirs, args.output, expected_shards=args.shards, allow_partial=args.allow_partial)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, default=str))
    else:
        for label, shards in rep.shards.items():
            from nel_assets.engine.merge import ranges

            print(f"{label}: shards {ranges(shards)} of {rep.expected.get(label)}")
        for p in rep.problems:
            print(f"problem: {p}")
        for w in rep.warnings:
            print(f"warning: {w}")
        for b in rep.bundles:
            s = b["score"]

            def pct(x: float | None) -> str:
                return "n/a" if x is None else f"{100 * x:.2f}"

            print(f"{b['benchmark']}/{b['model']}: score {pct(s.get('mean'))}% "
                  f"95% CI [{pct(s.get('ci_low'))}, {pct(s.get('ci_high'))}] ({s.get('ci_method') or 'n/a'}) "
                  f"over {s.get('n_items')} items"
                  f"{'' if b.get('complete') else ' (PARTIAL)'}")
        if rep.merged:
            print(f"merged into {rep.output} ({rep.copied} shard(s) copied)")
        else:
            print("not merged: the run is incomplete (fix the problems above, or pass --allow-partial)")
    if not rep.merged:
        return 1
    return 0 if rep.complete or args.allow_partial else 1
