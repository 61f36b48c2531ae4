"""`nel data list | pull NAME | import NAME PATH`: the built-in benchmarks' original files;
`nel data import-run PATH -o OUT`: a NeMo Evaluator 0.3.0 run into nel's store.

`list` shows, for every benchmark, its canonical source, where nel looks for each file
(`NEL_DATA_DIR`, then the cache), whether it is there and whether its sha256 is the
expected one. `pull` downloads into the cache on a connected machine; `import` copies a
local original into the cache, checking its sha256 when known.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `data` with its `list`, `pull` and `import` subcommands."""
    data = sub.add_parser("data", help="list, download or import benchmark data files")
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    ls = dsub.add_parser("list", help="every benchmark: source, local path, present, sha256 check")
    ls.add_argument("--json", action="store_true", help="print as JSON")
    ls.add_argument("--no-verify", action="store_true", help="skip sha256 checks (faster)")
    ls.set_defaults(func=_cmd_list)
    pull = dsub.add_parser("pull", help="download a benchmark's files into the cache")
    pull.add_argument("name")
    pull.add_argument("--timeout", type=float, default=30.0, help="seconds per download")
    pull.set_defaults(func=_cmd_pull)
    imp = dsub.add_parser("import", help="copy a local original file or folder into the cache")
    imp.add_argument("name")
    imp.add_argument("path")
    imp.set_defaults(func=_cmd_import)
    info = dsub.add_parser("info", help="where nel looks for an agent benchmark's task files "
                           "and how to get them")
    info.add_argument("name")
    info.set_defaults(func=_cmd_info)
    run = dsub.add_parser(
        "import-run", help="bring a NeMo Evaluator 0.3.0 run into a nel output dir as a model partition",
        description="Read a NeMo Evaluator 0.3.0 output (a run directory, a benchmark directory, "
        "an eval-*.json bundle with results.jsonl beside it, or a sharded run's shard_N/ layout), "
        "check it is whole, and write it into OUTPUT's Parquet store as the model partition NAME "
        "(bundle, report and exports built from its per-item results), registered in OUTPUT's "
        "Dagster instance. A config with `comparison: {baseline: NAME}` and `output.dir: OUTPUT` "
        "then compares new models against it without evaluating it again. Bad input writes "
        "nothing (exit 2).")
    run.add_argument("path", help="NeMo Evaluator output (directory or eval-*.json)")
    run.add_argument("-o", "--output", required=True, help="nel output directory to import into")
    run.add_argument("--model", help="model partition name (default: the run's config.model)")
    run.add_argument("--dagster-home", help="Dagster instance to record it in (default OUTPUT/.dagster)")
    run.set_defaults(func=_cmd_import_run)
    data.set_defaults(func=lambda a: (data.print_help(), 2)[1])


def _where(bench: str, relpath: str) -> str:
    from benchmarks.datasets import cache_root, data_root

    root = data_root() or cache_root()
    return str(root / bench / relpath)


def _cmd_list(args: argparse.Namespace) -> int:
    import json

    from benchmarks.sources import SOURCES, file_status

    out = []
    for name in sorted(SOURCES):
        src = SOURCES[name]
        files = []
        for f in src.files:
            st = file_status(name, f, verify=not args.no_verify)
            files.append({"file": f.relpath, "required": f.required,
                          "path": str(st.path) if st.path else _where(name, f.relpath),
                          "present": st.present, "sha256": st.check,
                          "expected_sha256": f.sha256, "url": f.url})
        ready = all(x["present"] for x in files if x["required"])
        ok = all(x["sha256"] != "mismatch" for x in files)
        out.append({"benchmark": name, "items": src.n_items, "source": src.origin,
                    "hf_id": src.hf_id, "revision": src.hf_revision, "license": src.license,
                    "judge": src.judge, "status": ("present" if ready else "missing")
                    + ("" if ok else " (sha256 mismatch)"), "files": files})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for b in out:
        print(f"{b['benchmark']:<12} {b['status']:<10} {b['items']:>6} items  "
              f"{b['source']}" + (f"  [hf: {b['hf_id']}@{b['revision']}]" if b["hf_id"] else ""))
        for f in b["files"]:
            mark = "ok " if f["present"] else ("-- " if not f["required"] else "!! ")
            print(f"    {mark}{f['file']:<36} {'present' if f['present'] else 'missing':<8} "
                  f"sha256 {f['sha256']:<8} {f['path']}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from benchmarks.sources import pull

    for p in pull(args.name, timeout=args.timeout):
        print(f"{args.name}: {p}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from benchmarks.sources import import_path

    for p in import_path(args.name, args.path):
        print(f"{args.name}: imported {p}")
    return 0


def _cmd_import_run(args: argparse.Namespace) -> int:
    from dagster_project.import_run import import_nemo_run

    res = import_nemo_run(args.path, args.output, model=args.model, dagster_home=args.dagster_home)
    for b in res.bundles:
        s = b["score"]
        print(f"{b['benchmark']}/{b['model']}: score {100 * s['mean']:.2f}% over {s.get('n_items')} items "
              f"({s.get('n_samples')} samples), imported from {b['imported_from']}")
    print(f"imported into {res.output} (Dagster home {res.dagster_home})")
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    """An agent benchmark's task files: the directories nel reads (found or not) and how to
    get them; other benchmarks point at `nel data list`."""
    from benchmarks.agentic import AGENT_BENCHMARKS, candidate_dirs, harbor_cache_dir
    from benchmarks.uri_schemes import is_uri
    from nel_resources.config import ConfigError

    name = args.name
    if is_uri(name, "harbor"):
        d = harbor_cache_dir(name.partition("://")[2])
        print(f"{name}: Harbor task directories, read from {d} "
              f"({'present' if d.is_dir() else 'missing'}); nel does not download from the "
              "Harbor registry: copy the dataset there or set HARBOR_DATASETS_DIR")
        return 0
    bench = AGENT_BENCHMARKS.get(name)
    if bench is None:
        raise ConfigError(f"nel data info: {name!r} is not an agent benchmark "
                          f"({', '.join(sorted(AGENT_BENCHMARKS))}, harbor://NAME@VERSION); "
                          "`nel data list` shows the others' files")
    fmt = ("Harbor task directories (instruction.md, task.toml, environment/Dockerfile, "
           "tests/test.sh)" if bench.format == "harbor" else "PinchBench task files (tasks/task_*.md)")
    print(f"{name}: {fmt}")
    for d in candidate_dirs(name):
        print(f"  {'present' if d.is_dir() else 'missing'}  {d}")
    print("  or: `params.tasks_dir: PATH` on the benchmark")
    print(f"how to get them: {bench.how_to_get}")
    return 0
