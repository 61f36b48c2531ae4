"""Which directories `nel eval merge` merges: NeMo Evaluator's layout (one OUTPUT_DIR whose
`shard_0/`, `shard_1/`, ... sub-directories each hold one shard process's output) or nel's
(the output dirs named on the command line)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from benchmarks.errors import NelError

_SHARD_DIR = re.compile(r"^shard_(\d+)$")


def shard_subdirs(root: Path) -> dict[int, Path]:
    """`shard_<N>/` sub-directories of `root`, by N."""
    out: dict[int, Path] = {}
    if root.is_dir():
        for d in root.iterdir():
            m = _SHARD_DIR.match(d.name)
            if m and d.is_dir():
                out[int(m.group(1))] = d
    return dict(sorted(out.items()))


def merge_sources(dirs: list[str], output: str | None) -> tuple[list[str], str | None]:
    """`(source dirs, merged output dir)` for the command line's DIRs and -o.

    One DIR with `shard_N/` sub-directories merges them (and DIR's own results, if any)
    into DIR, as NeMo Evaluator's `eval merge OUTPUT_DIR` does; a gap in the N is reported
    as it reports it (the merge itself then says which shards and problems are missing).
    """
    if not dirs:
        raise NelError("give the directory to merge: OUTPUT_DIR with shard_0/, shard_1/, ... "
                       "sub-directories, or the output dirs of the shard processes")
    if len(dirs) != 1:
        return dirs, output
    root = Path(dirs[0]).expanduser()
    subs = shard_subdirs(root)
    if not subs:
        return dirs, output
    missing = sorted(set(range(max(subs) + 1)) - set(subs))
    if missing:
        print(f"warning: missing shard directories: {', '.join(f'shard_{i}' for i in missing)} "
              f"in {root}", file=sys.stderr)
    own = any((p / "shard_results").is_dir() for p in root.iterdir())
    sources = ([str(root)] if own else []) + [str(d) for d in subs.values()]
    return sources, output or str(root)


def nemo_sources_into_store(sources: list[str], output: str | None) -> list[str]:
    """Bring the NeMo Evaluator 0.3.0 shard outputs among `sources` into the merged output's
    store, as shard partitions, so one merge combines both tools' shards; returns the sources
    `merge_outputs` reads then (nel's own dirs, and the output dir for the converted ones).

    Every NeMo Evaluator source is read and checked before anything is written: a half-written
    or torn shard, or a bundle of an unknown version, is one error line and writes nothing.
    """
    from nel_assets.engine.nemo.nemo_results import (
        load_nemo_benches,
        nemo_bench_dirs,
        store_nemo_benches,
        with_shard,
    )
    from nel_resources.storage.store import ResultStore

    out = str(Path(output or sources[0]).expanduser())
    theirs: list[str] = []
    ours: list[str] = []
    for s in sources:
        p = Path(s).expanduser()
        has_nemo = p.is_dir() and not ResultStore(p).benchmarks() and any(
            (whole or any(shards.values())) for whole, shards in [nemo_bench_dirs(p)])
        (theirs if has_nemo else ours).append(s)
    if not theirs:
        return sources
    benches = []
    for s in theirs:
        m = _SHARD_DIR.match(Path(s).name)
        for b in load_nemo_benches(s, combine_shards=False):
            if m and b.shard is None:  # a shard process that did not record its shard
                b = with_shard(b, int(m.group(1)), len(sources))
            benches.append(b)
    store_nemo_benches(benches, out)
    return ours + ([out] if Path(out).resolve() not in {Path(s).resolve() for s in ours} else [])
