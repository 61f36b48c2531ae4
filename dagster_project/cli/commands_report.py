"""`nel eval report`, `nel report` (all benchmarks, one document) and `nel eval merge`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dagster_project.cli.commands_runs import guard_run_errors

_FORMATS = ["markdown", "html", "csv", "json", "latex"]


def _report_args(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    if top:
        # NeMo Evaluator's `report BUNDLE_PATHS...`: run directories or bundle JSON files.
        p.add_argument("paths", nargs="+", metavar="PATH",
                       help="output directory of a run, or a bundle file (bundle.json, or an "
                       "eval-*.json export of a run); several are combined in one report")
    else:
        p.add_argument("dir", nargs="?", help="output directory of a run")
        p.add_argument("-r", "--run-id", help="a run's id instead of its directory (see "
                       "`nel eval jobs`); a DIR given too wins")
        p.add_argument("--with-results", action="store_true",
                       help="with -r, also fetch per-sample results (NeMo Evaluator); a local "
                       "directory always has them")
    p.add_argument("-f", "--format", default=None, choices=_FORMATS,
                   help="markdown (default), html (self-contained, plots + per-sample drill-down), "
                   "csv, json, latex (a tabular fragment)")
    p.add_argument("--all-formats", action="store_true",
                   help="write every format (report.md/.html/.csv/.json/.tex) into -o DIR "
                   "(default: the current directory, as in NeMo Evaluator)")
    p.add_argument("-o", "--output", help="file to write (a directory with --all-formats); default "
                   "stdout, except an HTML report at a terminal: report.html in the run directory")
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
    rep.set_defaults(func=guard_run_errors(_cmd_report))

    top = sub.add_parser("report", help="one report across every benchmark and model of a run",
                         description="Like `nel eval report`, defaulting to the HTML report "
                         "across all benchmarks (plots, comparison, per-sample drill-down).")
    _report_args(top, top=True)
    top.set_defaults(func=guard_run_errors(_cmd_report), default_format="html")

    mg = EVAL_SUBPARSERS.add_parser(
        "merge", help="merge shard outputs and recompute global metrics",
        description="Combine the shard outputs of a distributed run (one dir, or several dirs "
        "written by separate shard processes), refuse duplicate samples, report missing shards "
        "and uncovered problem ranges, and rebuild every bundle from all rows. Exit status: 0 "
        "merged and complete; 1 incomplete (nothing merged unless --allow-partial); 2 errors "
        "such as duplicate samples.")
    mg.add_argument("dirs", nargs="*", metavar="DIR",
                    help="output dir(s) holding shard results; one DIR with shard_0/, shard_1/, "
                    "... sub-directories (NeMo Evaluator's layout) merges those into DIR")
    mg.add_argument("-n", "--repeats", type=int, default=None,
                    help="repeats per problem the shards must hold (default: read from the rows); "
                    "a shard that holds another number is a problem")
    mg.add_argument("-r", "--run-id", help="a run's id instead of its directory (see "
                    "`nel eval jobs`); a DIR given too wins")
    mg.add_argument("-o", "--output", help="merged output dir (default: the first DIR)")
    mg.add_argument("--shards", type=int, default=None,
                    help="shards each benchmark should have (default: recorded or inferred from the dataset)")
    mg.add_argument("--allow-partial", action="store_true",
                    help="merge anyway when shards or problems are missing (bundles say complete: false)")
    mg.add_argument("--json", action="store_true", help="print the merge report as JSON")
    mg.set_defaults(func=guard_run_errors(_cmd_merge))


def _write(path: str | None, text: str) -> None:
    if path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        print(f"wrote {p}" + (f" ({len(text.encode()) // 1024} KB; open it in a browser)"
                              if p.suffix == ".html" else ""), file=sys.stderr)
    else:
        sys.stdout.write(text)


def _dir_of_run_id(args: argparse.Namespace) -> str | None:
    """The output directory `-r/--run-id` names (a run `nel eval run` recorded; see `nel eval
    jobs`), as NeMo Evaluator resolves a local run's id. None when no `-r` was given.

    Raises:
        RunCommandError: no run with that id (one `Error:` line, exit 1, as the peer).
    """
    run_id = getattr(args, "run_id", None)
    if not run_id:
        return None
    from dagster_project import run_registry
    from dagster_project.cli.commands_runs import RunCommandError

    record = run_registry.resolve(run_id=run_id)
    if record is None:
        raise RunCommandError(f"No run metadata found for run-id={run_id}.")
    return record.output_dir


def _bundle_file(path: Path) -> dict[str, Any]:
    """A bundle from a file: nel's bundle.json, or an eval-*.json nel wrote (NeMo Evaluator's
    bundle with nel's own under `bundle`; older nel: <out>/<bench>/exports/<model>/eval-*.json,
    whose bundle.json is read)."""
    import json

    from benchmarks.errors import NelError

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NelError(f"{path}: not a readable bundle JSON file: {exc}") from None
    if isinstance(doc, dict) and "score" in doc and "benchmark" in doc:
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("bundle"), dict) and "score" in doc["bundle"]:
        return doc["bundle"]
    if path.name.startswith("eval-") and path.parent.parent.name == "exports":
        bundle = path.parents[2] / "bundle" / f"model={path.parent.name}" / "bundle.json"
        if bundle.is_file():
            return _bundle_file(bundle)
    raise NelError(f"{path}: not a nel bundle (give a bundle.json or an eval-*.json inside "
                   "a nel output directory)")


def _collect_paths(paths: list[str], *, models: list[str] | None, benches: list[str] | None,
                   with_samples: bool, max_rows: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Bundles (and per-sample details where a store holds them) of directories and files."""
    from benchmarks.errors import NelError
    from nel_assets.engine.nemo.nemo_results import (
        benchmark_name,
        detect,
        load_nemo_benches,
        nel_bundle,
    )
    from nel_assets.engine.reports import collect, sample_details
    from nel_resources.storage.store import ResultStore, asset_name

    bundles: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir() and ResultStore(p).benchmarks():
            b, d = collect(ResultStore(p), models=models, benchmarks=benches,
                           with_samples=with_samples, max_rows=max_rows)
            bundles += b
            details.update(d)
        elif p.is_dir() or (p.is_file() and detect(p) == "nemo"):
            # NeMo Evaluator's output: bundles recomputed from its per-item results
            for nb in load_nemo_benches(p):
                b1 = nel_bundle(nb)
                if (models is None or b1["model"] in models) and (
                        benches is None or asset_name(nb.benchmark) in benches):
                    bundles.append(b1)
                    if with_samples:
                        details[f"{b1['benchmark']}/{b1['model']}"] = sample_details(nb.table, max_rows)
        elif p.is_file():
            b1 = _bundle_file(p)
            if (models is None or b1.get("model") in models) and (
                    benches is None or asset_name(str(benchmark_name(b1))) in benches):
                bundles.append(b1)
        else:
            raise NelError(f"no such output directory or bundle file: {p}")
    return bundles, details


def _cmd_report(args: argparse.Namespace) -> int:
    import json

    from benchmarks.errors import NelError
    from nel_assets.engine.reports import EXTENSIONS, render
    from nel_assets.engine.reports.html import MAX_ROWS
    from nel_resources.storage.store import asset_name, slugify

    if getattr(args, "with_results", False):
        print("note: --with-results only changes what -r fetches from a remote run; a local "
              "run's report reads its per-sample results anyway", file=sys.stderr)
    paths = getattr(args, "paths", None) or ([args.dir] if getattr(args, "dir", None) else [])
    if not paths and (run_dir := _dir_of_run_id(args)) is not None:
        paths = [run_dir]  # as NeMo Evaluator: a given RESULTS_DIR wins over -r
    if not paths:
        raise NelError("give the output directory of a run (nel eval report DIR) or its id (-r)")
    fmt = args.format or getattr(args, "default_format", "markdown")
    models = None if not args.model else [slugify(m) for m in args.model]
    benches = None if not args.bench else [asset_name(b) for b in args.bench]
    need_samples = args.all_formats or fmt == "html"
    bundles, details = _collect_paths(paths, models=models, benches=benches, with_samples=need_samples,
                                      max_rows=args.max_rows or MAX_ROWS)
    if not bundles:
        raise NelError(f"no bundles under {', '.join(paths)}: run `nel eval run` (or `nel eval merge`) first")
    comparison: dict[str, Any] | None = None
    if args.comparison:
        try:
            comparison = json.loads(Path(args.comparison).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise NelError(f"--comparison {args.comparison}: not a readable regression.json: {exc}") from None
        if not isinstance(comparison, dict) or "benchmarks" not in comparison:
            raise NelError(f"--comparison {args.comparison}: not a regression.json (no 'benchmarks')")
    from nel_assets.engine.results.trend_store import read_trend_rows

    # the checkpoint_trends rows (deltas, alarms) of the output directories given, if built
    trends = [r for p in paths if Path(p).expanduser().is_dir() for r in read_trend_rows(Path(p).expanduser()) or []]
    if args.all_formats:
        out = Path(args.output or ".")  # NeMo Evaluator writes into the current directory
        out.mkdir(parents=True, exist_ok=True)
        for f in _FORMATS:
            _write(str(out / f"report.{EXTENSIONS[f]}"),
                   render(f, bundles, details=details, comparison=comparison, trends=trends))
        return 0
    text = render(fmt, bundles, details=details, comparison=comparison, trends=trends)
    output = args.output
    if output is None and fmt == "html" and sys.stdout.isatty():
        # A whole HTML page is no use on a terminal: write it where the user can open it.
        output = str(_default_html_path(paths))
    _write(output, text)
    return 0


def _default_html_path(paths: list[str]) -> Path:
    """Where `nel report` puts its HTML page when stdout is a terminal and no -o was given:
    beside the results for one run directory, else in the current directory."""
    first = Path(paths[0]).expanduser()
    if len(paths) == 1 and first.is_dir() and os.access(first, os.W_OK):
        return first / "report.html"
    return Path("report.html")


def _cmd_merge(args: argparse.Namespace) -> int:
    import json

    from dagster_project.cli.merge_layout import merge_sources, nemo_sources_into_store
    from nel_assets.engine.results.merge import merge_outputs

    dirs = args.dirs or ([d] if (d := _dir_of_run_id(args)) is not None else [])
    sources, output = merge_sources(dirs, args.output)
    sources = nemo_sources_into_store(sources, output)  # NeMo Evaluator's shards, as nel's
    rep = merge_outputs(sources, output, expected_shards=args.shards, allow_partial=args.allow_partial,
                        expected_repeats=args.repeats)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, default=str))
    else:
        for label, shards in rep.shards.items():
            from nel_assets.engine.results.merge import ranges

            print(f"{label}: shards {ranges(shards)} of {rep.expected.get(label)}")
        for p in rep.problems:
            print(f"problem: {p}")
        for w in rep.warnings:
            print(f"warning: {w}")
        from nel_assets.engine.results.headline import headline_note

        for b in rep.bundles:
            s = b["score"]

            def pct(x: float | None) -> str:
                return "n/a" if x is None else f"{100 * x:.2f}"

            print(f"{b['benchmark']}/{b['model']}: score {pct(s.get('mean'))}% "
                  f"95% CI [{pct(s.get('ci_low'))}, {pct(s.get('ci_high'))}] ({s.get('ci_method') or 'n/a'}) "
                  f"over {s.get('n_items')} items"
                  f"{'' if b.get('complete') else ' (PARTIAL)'}")
            if note := headline_note(b):
                print(f"  {note}")
        if rep.merged:
            print(f"merged into {rep.output} ({rep.copied} shard(s) copied)")
        else:
            print("not merged: the run is incomplete (fix the problems above, or pass --allow-partial)")
    if not rep.merged:
        return 1
    return 0 if rep.complete or args.allow_partial else 1
