"""`nel list`: the benchmarks nel can run, with their type and source, by source section.

Same flags and sections as NeMo Evaluator 0.3.0's `nel list` (`-s/--source all|builtin|
skills|lm-eval`, `--data-dir`), plus `-s vlmevalkit` (the VLMEvalKit TSV files found locally;
not part of `all`, whose sections stay NeMo Evaluator's). The skills section lists the NeMo
Skills benchmarks prepared in the Skills data directory (`--data-dir`, else NEL_SKILLS_DIR;
benchmarks.skills.layout). `-s lm-eval` lists the lm-eval tasks whose data is here
(`lm-eval://TASK`; `all` only points at it: the scan takes seconds).
nel's extra: `--import FILE` lists the benchmarks a BYOB
module registers, with the file as their source.
"""

from __future__ import annotations

import argparse
import sys

_SOURCES = ["all", "builtin", "skills", "lm-eval", "vlmevalkit"]

def register(sub: argparse._SubParsersAction) -> None:
    """Add `list`."""
    ls = sub.add_parser("list", help="list the benchmarks: name, type, source",
                        description="List the benchmarks nel can run, by source, with their "
                        "scorer type, data source and the command that runs them.")
    ls.add_argument("-s", "--source", choices=_SOURCES, default="all",
                    help="which source to list (default all)")
    ls.add_argument("--data-dir", metavar="DIR",
                    help="NeMo Skills data directory (for --source skills; default NEL_SKILLS_DIR), "
                    "or VLMEvalKit's TSV folder for --source vlmevalkit (default "
                    "NEL_VLMEVALKIT_DIR, LMUData, ~/LMUData)")
    ls.add_argument("--import", dest="imports", action="append", default=[], metavar="FILE",
                    help="import a BYOB module or .py file first and list its benchmarks; repeatable")
    ls.set_defaults(func=_cmd_list)


def _origin(name: str, factory: object) -> str:
    """Where a benchmark comes from: its dataset for a built-in, its file for a module."""
    from benchmarks._registry import is_builtin
    from benchmarks.plugins import benchmark_origin
    from benchmarks.sources import Source

    src = getattr(factory, "source", None) if is_builtin(name) else None
    if isinstance(src, Source):  # a built-in's data source, as its class declares it
        return f"hf:{src.hf_id}" if src.hf_id else src.origin.split(" (")[0]
    origin = benchmark_origin(name)
    if origin:
        return origin
    mod = sys.modules.get(getattr(factory, "__module__", "") or "")
    return str(getattr(mod, "__file__", None) or getattr(factory, "__module__", "?"))


def _kind(name: str, factory: object) -> str:
    """The type `nel list` shows: the benchmark's own `scorer_family`; a benchmark a file
    registered without one is `byob` (`judge` when it needs one)."""
    from benchmarks._registry import is_builtin

    family = getattr(factory, "scorer_family", None)
    if family:
        return str(family)
    if is_builtin(name):  # a built-in must say what it is; tests check every one does
        return "unspecified"
    return "judge" if getattr(factory, "requires_judge", False) else "byob"


def _builtin_rows() -> list[str]:
    from benchmarks import get_factory, list_benchmarks

    rows = []
    for name in list_benchmarks():
        factory = get_factory(name)
        kind = _kind(name, factory)
        needs = ""
        if getattr(factory, "needs_task_files", False):  # agent benchmarks: nothing downloads
            kind, needs = "agent", " (needs local task files)"
        elif getattr(factory, "needs_solver", None):  # e.g. perplexity: a config names it
            needs = f" (needs a config with solver: {{type: {factory.needs_solver}}})"
        rows.append(f"{name:<30} type={kind:<17} source={_origin(name, factory):<40} "
                    f"nel eval run --bench {name}{needs}")
    return rows


def _lm_eval_rows() -> list[str]:
    """One row per lm-eval task with local data, or one line on what is missing."""
    from benchmarks.errors import NelError
    from benchmarks.lm_eval.local_data import default_data_dir
    from benchmarks.lm_eval.tasks import local_tasks, require_lm_eval

    try:
        require_lm_eval()
    except NelError as exc:
        return [f"({exc})"]
    data_dir = default_data_dir()
    rows = [f"lm-eval://{name:<40} type={kind:<22} data={ds}"
            for name, kind, ds in local_tasks(data_dir)]
    return rows or [f"(no lm-eval task has local data under {data_dir}: put a dataset at "
                    "<dir>/<dataset_path>/<dataset_name>/<split>.jsonl, NEL_LM_EVAL_DATA_DIR=<dir>)"]


def _skills_rows(data_dir: str | None) -> list[str]:
    """One row per Skills benchmark prepared in the data directory, or how to prepare one."""
    from benchmarks.skills import local_benchmarks, skills_dir

    found = local_benchmarks(data_dir)
    if not found:
        return [f"(none in {skills_dir(data_dir)} — run: ns prepare_data <benchmark> "
                f"--data_dir={skills_dir(data_dir)})"]
    return [f"skills://{name:<23} type={kind:<17} splits=[{', '.join(splits)}]  "
            f"nel eval run --bench skills://{name}" for name, kind, splits in found]


def _vlmevalkit_rows(data_dir: str | None) -> list[str]:
    """The VLMEvalKit TSV files in the local folder, each runnable as `vlmevalkit://NAME`."""
    from pathlib import Path

    from benchmarks.vlmevalkit import local_datasets, vlmevalkit_dir

    d = Path(data_dir).expanduser() if data_dir else vlmevalkit_dir()
    rows = [f"{'vlmevalkit://' + n:<30} type={'vlm':<17} source={d / (n + '.tsv')!s:<40} "
            f"nel eval run --bench vlmevalkit://{n}" for n in local_datasets(d)]
    return rows or [f"(none in {d}: put VLMEvalKit's <NAME>.tsv files there, or set "
                    "NEL_VLMEVALKIT_DIR)"]


def _cmd_list(args: argparse.Namespace) -> int:
    if args.imports:  # benchmarks.serve (the HTTP app, asyncio) only when there is a module
        from benchmarks.serve import import_plugins

        import_plugins(args.imports)
    if args.data_dir and args.source not in ("all", "skills", "vlmevalkit"):
        print("note: --data-dir is the NeMo Skills data directory, used only by --source skills",
              file=sys.stderr)
    sections: list[tuple[str, list[str]]] = []
    if args.source in ("all", "builtin"):
        sections.append(("Built-in benchmarks", _builtin_rows()))
    if args.source in ("all", "skills"):
        sections.append(("NeMo Skills benchmarks", _skills_rows(args.data_dir)))
    if args.source == "all":  # scanning lm-eval's ~15k task YAMLs takes seconds: on request
        sections.append(("lm-eval-harness tasks", [
            "(lm-eval://TASK; `nel list -s lm-eval` lists the tasks whose data is here)"]))
    elif args.source == "lm-eval":
        sections.append(("lm-eval-harness tasks", _lm_eval_rows()))
    if args.source == "vlmevalkit":  # only when asked: `all` keeps NeMo Evaluator's sections
        sections.append(("VLMEvalKit datasets", _vlmevalkit_rows(args.data_dir)))
    for title, rows in sections:
        print(f"\n{title}:")
        for row in rows or ["(none available)"]:
            print(f"  {row}")
    print()
    return 0
