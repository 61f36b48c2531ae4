"""Merge shard outputs of a distributed run and recompute global metrics.

Shard processes (SLURM array tasks, Kubernetes indexed jobs, ``NEL_SHARD_IDX``) each write
committed shards (``part-0.parquet`` + ``_fingerprint.json``) into an output dir, the same one
or separate ones. ``merge_outputs`` gathers them into one store, then rebuilds each
(benchmark, model) bundle from *all* its rows, so scores, SEs and CIs are global (averaging
per-shard scores would weight shards wrongly and lose the item-level SE).

It refuses to merge silently what should not be merged:

* the same ``sample_id`` twice (two shards overlap, or one shard was copied twice with
  different contents) -> ``NelError`` naming the samples and where they come from;
* missing shards, problem ranges no shard covers, and shards without a commit marker are
  *problems*: reported, and the merge stops unless ``allow_partial`` (then the bundles say
  ``complete: false``).

The expected number of shards comes from ``expected_shards``, else each shard's fingerprint
record (``total`` when the writer records it), else it is inferred from the dataset (the
smallest count whose contiguous blocks match every shard present). No Dagster import here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.errors import NelError
from nel_assets.engine.evaluation.sharding import shard_bounds
from nel_resources.storage.arrow import pa
from nel_resources.storage.store import ResultStore

__all__ = ["MergeReport", "merge_outputs", "ranges"]


@dataclass
class ShardCopy:
    """One committed shard found in a source dir."""

    folder: str
    model: str
    shard: int
    path: Path  # the shard directory
    fingerprint: dict[str, Any]


@dataclass
class MergeReport:
    """What a merge found and did."""

    output: Path
    sources: list[Path]
    shards: dict[str, list[int]] = field(default_factory=dict)  # "<bench>/<model>" -> shards
    expected: dict[str, int | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    copied: int = 0
    bundles: list[dict[str, Any]] = field(default_factory=list)
    merged: bool = False

    @property
    def complete(self) -> bool:
        """No missing shard, uncovered problem range or uncommitted shard."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"output": str(self.output), "sources": [str(s) for s in self.sources],
                "shards": self.shards, "expected_shards": self.expected, "complete": self.complete,
                "merged": self.merged, "problems": self.problems, "warnings": self.warnings,
                "copied_shards": self.copied,
                "bundles": [{"benchmark": b["benchmark"], "model": b["model"],
                             "score": b["score"].get("mean"), "ci_low": b["score"].get("ci_low"),
                             "ci_high": b["score"].get("ci_high"), "n_items": b["score"].get("n_items"),
                             "complete": b.get("complete")} for b in self.bundles]}


def ranges(values: Iterable[int]) -> str:
    """Compact ``0-9, 20, 30-31`` form of a set of integers."""
    vals = sorted(set(values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out)


def _scan(root: Path, problems: list[str]) -> list[ShardCopy]:
    found = []
    for bench_dir in sorted(p for p in root.iterdir() if (p / "shard_results").is_dir()):
        for mdir in sorted((bench_dir / "shard_results").glob("model=*")):
            for sdir in sorted(mdir.glob("shard=*")):
                try:
                    shard = int(sdir.name.split("=", 1)[1])
                except ValueError:
                    continue
                part, fp = sdir / "part-0.parquet", sdir / "_fingerprint.json"
                where = f"{bench_dir.name}/{mdir.name.split('=', 1)[1]} shard {shard} ({sdir})"
                if not part.exists():
                    continue
                if not fp.exists():
                    problems.append(f"{where}: no commit marker (_fingerprint.json): the shard "
                                    "was interrupted; rerun it")
                    continue
                try:
                    record = json.loads(fp.read_text())
                except (OSError, json.JSONDecodeError):
                    problems.append(f"{where}: unreadable _fingerprint.json")
                    continue
                found.append(ShardCopy(bench_dir.name, mdir.name.split("=", 1)[1], shard, sdir, record))
        jdir = bench_dir / "_journal"
        if jdir.is_dir():
            for j in sorted(jdir.rglob("journal-*.jsonl")):
                rel = j.parent.relative_to(jdir)
                problems.append(f"{bench_dir.name}: unfinished shard journal {rel} ({j}): a shard "
                                "process did not finish; rerun it to resume")
    return found


def _dataset_indices(sources: Sequence[Path], folder: str) -> list[int] | None:
    for src in sources:  # the whole selection, as a shard process recorded it
        sel = ResultStore(src).dataset_selection_path(folder)
        if sel.exists():
            return sorted(int(x) for x in json.loads(sel.read_text())["indices"])
    for src in sources:  # a store written before the dataset was partitioned by shard
        p = ResultStore(src).dataset_path(folder)
        if p.exists():
            t = pq.read_table(p, columns=["problem_idx"])
            return sorted(int(x) for x in t.column("problem_idx").to_pylist())
    return None


def _infer_total(all_idx: list[int], present: dict[int, set[int]]) -> int | None:
    """Smallest shard count whose contiguous blocks contain every present shard's problems."""
    n = len(all_idx)
    start = max(present) + 1
    for total in range(start, max(n, start) + 1):
        ok = True
        for s, probs in present.items():
            lo, hi = shard_bounds(n, s, total)
            block = set(all_idx[lo:hi])
            if not probs <= block or (lo < n and probs and all_idx[lo] not in probs):
                ok = False
                break
        if ok:
            return total
    return None


def merge_outputs(sources: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str] | None = None,
                  *, expected_shards: int | None = None, allow_partial: bool = False,
                  build: bool = True, expected_repeats: int | None = None) -> MergeReport:
    """Combine shard outputs and rebuild every (benchmark, model) bundle.

    Args:
        sources: Output dirs written by shard processes (one dir is fine).
        output: Where the merged store goes (default: the first source).
        expected_shards: Shards each benchmark should have (default: recorded or inferred).
        allow_partial: Merge and build bundles even when shards or problems are missing
            (bundles then carry ``complete: false`` and the problems).
        build: Rebuild bundles, reports and exports.
        expected_repeats: Repeats per problem every shard must hold (NeMo Evaluator's
            `eval merge -n`); a problem with another number is a problem of the merge.

    Returns:
        The report; ``merged`` is False when problems stopped it.

    Raises:
        NelError: Unknown dirs, nothing to merge, or duplicate samples.
    """
    srcs = [Path(s).expanduser().resolve() for s in sources]
    for s in srcs:
        if not s.is_dir():
            raise NelError(f"no such output directory: {s}")
    out = Path(output).expanduser().resolve() if output else srcs[0]
    rep = MergeReport(output=out, sources=srcs)
    found: list[ShardCopy] = []
    for s in srcs:
        found += _scan(s, rep.problems)
    if not found:
        raise NelError(f"no committed shard results under {', '.join(map(str, srcs))}")

    # one copy per (bench, model, shard): identical copies collapse, different ones clash
    by_key: dict[tuple[str, str, int], list[ShardCopy]] = defaultdict(list)
    for c in found:
        by_key[(c.folder, c.model, c.shard)].append(c)
    chosen: dict[tuple[str, str, int], ShardCopy] = {}
    clashes = []
    for key, copies in sorted(by_key.items()):
        versions = {c.fingerprint.get("data_version") for c in copies}
        if len(versions) > 1 or (None in versions and len(copies) > 1):
            clashes.append(f"{key[0]}/{key[1]} shard {key[2]} differs between "
                           + " and ".join(str(c.path) for c in copies))
        chosen[key] = copies[0]
    if clashes:
        raise NelError("duplicate shards with different contents (the same samples twice):\n  "
                       + "\n  ".join(clashes))

    groups: dict[tuple[str, str], dict[int, ShardCopy]] = defaultdict(dict)
    for (folder, model, shard), c in chosen.items():
        groups[(folder, model)][shard] = c

    tables: dict[tuple[str, str], pa.Table] = {}
    for (folder, model), shards in sorted(groups.items()):
        label = f"{folder}/{model}"
        parts = {s: pq.read_table(c.path / "part-0.parquet", partitioning=None) for s, c in shards.items()}
        # duplicate samples across shards: the one thing a merge must never paper over
        seen: dict[str, int] = {}
        dups: dict[str, list[int]] = defaultdict(list)
        for s, t in sorted(parts.items()):
            for sid in t.column("sample_id").to_pylist():
                if sid in seen:
                    dups[sid] = dups[sid] or [seen[sid]]
                    dups[sid].append(s)
                else:
                    seen[sid] = s
        if dups:
            shown = "; ".join(f"{sid} (shards {', '.join(map(str, sh))})" for sid, sh in list(dups.items())[:10])
            more = f" and {len(dups) - 10} more" if len(dups) > 10 else ""
            raise NelError(f"{label}: {len(dups)} sample_id(s) appear more than once: {shown}{more}; "
                           "shards overlap (were they run with different shard counts?)")
        present = {s: {int(x) for x in t.column("problem_idx").to_pylist()} for s, t in parts.items()}
        rep.shards[label] = sorted(shards)
        all_idx = _dataset_indices(srcs, folder)
        recorded = {c.fingerprint.get("total") for c in shards.values()} - {None}
        total = expected_shards or (max(recorded) if recorded else None)
        if total is None and all_idx is not None:
            total = _infer_total(all_idx, present)
        if total is None:
            total = max(shards) + 1
            rep.warnings.append(f"{label}: shard count unknown (no dataset, no --shards): trailing "
                                "missing shards cannot be detected")
        rep.expected[label] = total
        missing = sorted(set(range(total)) - set(shards))
        if missing:
            rep.problems.append(f"{label}: missing shard(s) {ranges(missing)} of {total}")
        if all_idx is not None:
            covered = set().union(*present.values())
            gap = sorted(set(all_idx) - covered)
            if gap:
                rep.problems.append(f"{label}: problems {ranges(gap)} have no results "
                                    f"({len(gap)} of {len(all_idx)})")
        merged = pa.concat_tables(list(parts.values()), promote_options="default")
        if expected_repeats is not None:
            per_problem: dict[int, set[int]] = defaultdict(set)
            for pid, r in zip(merged.column("problem_idx").to_pylist(), merged.column("repeat").to_pylist(),
                              strict=True):
                per_problem[int(pid)].add(int(r or 0))
            off = sorted(p for p, reps in per_problem.items() if len(reps) != expected_repeats)
            if off:
                rep.problems.append(f"{label}: problems {ranges(off)} do not hold {expected_repeats} "
                                    f"repeats (-n/--repeats) ({len(off)} of {len(per_problem)})")
        failed = sum(1 for r in merged.column("reward").to_pylist() if r is None)
        if failed:
            rep.warnings.append(f"{label}: {failed} failed sample(s) (request errors, not scored); "
                                "rerun `nel eval run` to retry them")
        tables[(folder, model)] = merged

    if rep.problems and not allow_partial:
        return rep

    # copy shards into the output store (temp dir + rename: never a half-copied shard)
    for (folder, model), shards in groups.items():
        for s, c in shards.items():
            dest = ResultStore(out).root / folder / "shard_results" / f"model={model}" / f"shard={s}"
            if dest.resolve() == c.path.resolve():
                continue
            tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(c.path, tmp)
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
            rep.copied += 1
        # Each shard process wrote the dataset partitions it ran: the merge holds them all.
        ds = ResultStore(out).bench_dir(folder) / "dataset"
        for src in srcs:
            cand = ResultStore(src).bench_dir(folder) / "dataset"
            if cand.is_dir() and cand.resolve() != ds.resolve():
                shutil.copytree(cand, ds, dirs_exist_ok=True)
    rep.merged = True
    if not build:
        return rep

    from nel_assets.engine.evaluation.evaluate import build_model_bundle
    from nel_assets.engine.results.bundle import bundle_row

    store = ResultStore(out)
    for (folder, model), t in sorted(tables.items()):
        names = [n for n in t.column("benchmark").to_pylist() if n]
        bench = names[0] if names else folder
        bundle, _ = build_model_bundle(None, store, bench, model)
        label = f"{folder}/{model}"
        mine = [p for p in rep.problems if p.startswith(label + ":")]
        bundle.update({"shards_expected": rep.expected[label], "complete": not mine,
                       "merge_problems": mine})
        store.write_bundle(bench, model, bundle, bundle_row(bundle))
        rep.bundles.append(bundle)
    return rep
