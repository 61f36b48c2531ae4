"""Read NeMo Evaluator 0.3.0 result directories into nel's in-memory shapes.

NeMo Evaluator writes, per benchmark, ``<out>/<bench>/eval-<ts>-<bench>.json`` (the bundle:
``run_id``, ``sdk_version``, ``config``, ``benchmark: {name, samples, repeats, scores}``,
``n_results``) and ``results.jsonl`` (one row per problem × repeat: ``problem_idx``,
``repeat``, ``reward``, ``prompt``, ``model_response``, ``expected_answer``,
``extracted_answer``, ``scoring_details``, ``metadata``, ``tokens``, ``latency_ms``,
``trajectory``). A sharded run puts each shard process's output in ``<out>/shard_<N>/``
(the bundle's ``config.shard`` says ``{idx, total}``) and its ``eval merge`` writes the merged
``<out>/<bench>/`` next to them.

This module says which tool wrote a path (``detect``), checks that a NeMo Evaluator run is
whole (bundle present, ``results.jsonl`` neither torn nor short of ``n_results``, a known
``sdk_version`` and shape) and turns each benchmark into rows of nel's result schema
(``nel_resources.storage.schema``), so every command (compare, gate, reports, merge, ``nel data
import-run``) computes from per-item rewards exactly as it does for nel's own store. Bad
input is one ``NelError`` line saying what was expected and what was found. No Dagster here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.storage.arrow import pa
from nel_resources.storage.schema import rows_to_table
from nel_resources.storage.store import slugify

__all__ = [
    "SUPPORTED_SDK_PREFIX",
    "NemoBench",
    "benchmark_name",
    "detect",
    "is_nemo_bundle",
    "load_nemo_benches",
    "nel_bundle",
    "nemo_bench_dirs",
    "store_nemo_benches",
    "with_shard",
]

SUPPORTED_SDK_PREFIX = "0.3."
"""The NeMo Evaluator versions whose files nel reads (0.3.x share one bundle layout)."""

_SHARD_DIR = re.compile(r"^shard_(\d+)$")
_FOUND_SHOWN = 6  # directory entries named in a "found ..." message


@dataclass
class NemoBench:
    """One benchmark of a NeMo Evaluator run, as nel result rows.

    Attributes:
        benchmark: The benchmark name (the bundle's ``benchmark.name``).
        model: The model key (slug of ``config.model``, or the name asked for).
        model_id: The served model name (``config.model``).
        table: The rows in nel's result schema (``problem_idx``, ``repeat``, ``reward``, ...).
        bundle: The NeMo Evaluator bundle document as read.
        source: The bundle file.
        shard: ``(idx, total)`` of a shard process's output, None for a whole run.
        digest: Content hash of the bundle and results (a shard's ``data_version``).
    """

    benchmark: str
    model: str
    model_id: str | None
    table: pa.Table
    bundle: dict[str, Any]
    source: Path
    shard: tuple[int, int] | None
    digest: str

    @property
    def repeats(self) -> int:
        """Repeats per problem the run was configured with."""
        return int((self.bundle.get("config") or {}).get("repeats") or 1)


def benchmark_name(doc: Mapping[str, Any]) -> str | None:
    """The benchmark name of a bundle in either tool's shape: nel's ``benchmark: "name"`` or
    NeMo Evaluator's ``benchmark: {"name": ...}``."""
    b = doc.get("benchmark")
    if isinstance(b, Mapping):
        b = b.get("name")
    return b if isinstance(b, str) and b else None


def is_nemo_bundle(doc: Any) -> bool:
    """Whether a parsed eval-*.json claims to be NeMo Evaluator's bundle (it names its SDK)."""
    return isinstance(doc, Mapping) and "sdk_version" in doc


def _check_bundle(doc: Any, path: Path) -> None:
    """Refuse a NeMo Evaluator bundle of another version or shape (one line)."""
    version = doc.get("sdk_version")
    if not isinstance(version, str) or not version.startswith(SUPPORTED_SDK_PREFIX):
        raise NelError(f"{path}: a NeMo Evaluator bundle of an unknown version: expected sdk_version "
                       f"{SUPPORTED_SDK_PREFIX}x, found {version!r}")
    bench = doc.get("benchmark")
    if not isinstance(bench, Mapping) or not isinstance(bench.get("name"), str) \
            or not isinstance(bench.get("scores"), Mapping):
        found = type(bench).__name__ if not isinstance(bench, Mapping) else f"keys {sorted(bench)}"
        raise NelError(f"{path}: not the NeMo Evaluator {version} bundle shape: expected `benchmark` "
                       f"to be an object with `name` and `scores`, found {found}")
    n = doc.get("n_results")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise NelError(f"{path}: not the NeMo Evaluator {version} bundle shape: expected an integer "
                       f"`n_results`, found {n!r}")


def _read_bundle(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise NelError(f"{path}: unreadable bundle: {exc}") from None
    except json.JSONDecodeError as exc:
        raise NelError(f"{path}: a torn or half-written bundle: expected JSON, found invalid JSON at "
                       f"line {exc.lineno} ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise NelError(f"{path}: expected a bundle object, found a JSON {type(doc).__name__}")
    return doc


def _read_results(path: Path, expected: int) -> list[dict[str, Any]]:
    """The rows of a results.jsonl that must hold ``expected`` rows (the bundle's n_results)."""
    rows: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            last = no == len(lines) or all(not x.strip() for x in lines[no:])
            what = "its last line is cut off (the run was interrupted while writing)" if last \
                else f"line {no} is not JSON"
            raise NelError(f"{path}: a torn results.jsonl: expected one JSON object per line, "
                           f"found that {what}") from None
        if not isinstance(r, dict) or not isinstance(r.get("problem_idx"), int) \
                or isinstance(r.get("problem_idx"), bool):
            raise NelError(f"{path}:{no}: expected a NeMo Evaluator result row with an integer "
                           f"`problem_idx`, found {str(r)[:80]}")
        rows.append(r)
    if len(rows) != expected:
        raise NelError(f"{path}: a half-written run: the bundle says n_results={expected}, found "
                       f"{len(rows)} row(s) in results.jsonl")
    return rows


def _system_of(r: Mapping[str, Any]) -> str | None:
    for traj in r.get("trajectory") or []:
        for step in (traj.get("steps") if isinstance(traj, Mapping) else None) or []:
            if isinstance(step, Mapping) and step.get("source") == "system":
                return str(step.get("message"))
    return None


def _token_split(r: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Prompt and completion tokens from the ATIF trajectory's final metrics, when present."""
    for traj in r.get("trajectory") or []:
        fm = traj.get("final_metrics") if isinstance(traj, Mapping) else None
        if isinstance(fm, Mapping):
            return fm.get("total_prompt_tokens"), fm.get("total_completion_tokens")
    return None, None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else json.dumps(v, default=str)


def _nel_row(r: Mapping[str, Any], *, benchmark: str, model: str, model_id: str | None,
             run_id: str | None, shard: int) -> dict[str, Any]:
    pid, rep = int(r["problem_idx"]), int(r.get("repeat") or 0)
    meta = r.get("metadata") if isinstance(r.get("metadata"), Mapping) else {}
    details = dict(r.get("scoring_details") or {}) if isinstance(r.get("scoring_details"), Mapping) else {}
    if r.get("scorer_rewards"):
        details["scorer_rewards"] = r["scorer_rewards"]
    prompt_tok, comp_tok = _token_split(r)
    system = _system_of(r)
    prompt = _text(r.get("prompt"))
    messages = ([{"role": "system", "content": system}] if system else []) + \
        ([{"role": "user", "content": prompt}] if prompt is not None else [])
    # nel's own files give a failed request reward 0.0 (what the peer's readers expect) and
    # an `error`: in nel's rows a failed sample has no reward, so it is not scored as wrong.
    reward = None if r.get("error") else r.get("reward")
    return {
        "run_id": run_id, "benchmark": benchmark, "model": model, "model_id": model_id,
        "shard": shard, "problem_idx": pid, "repeat": rep, "sample_id": f"{pid}:{rep}",
        "category": _text(meta.get("category")) if meta.get("category") is not None else None,
        "prompt": prompt, "system": system, "messages": json.dumps(messages),
        "expected": _text(r.get("expected_answer")), "response": _text(r.get("model_response")),
        "reward": None if reward is None else float(reward),
        "extracted": _text(r.get("extracted_answer")), "method": _text(details.get("method")),
        "details": json.dumps(details, default=str) if details else None,
        "metadata": json.dumps(meta, default=str) if meta else None,
        "prompt_tokens": prompt_tok, "completion_tokens": comp_tok,
        "model_ms": r.get("latency_ms"), "total_ms": r.get("latency_ms"),
        "error": _text(r.get("error")) if r.get("error") else None,
    }


def read_nemo_bench(bundle_path: Path, *, model: str | None = None) -> NemoBench:
    """One benchmark of a NeMo Evaluator run: its bundle file and the results.jsonl beside it.

    Args:
        bundle_path: The ``eval-*.json`` file.
        model: Model key to record (default: the slug of the bundle's ``config.model``).

    Raises:
        NelError: Unknown version or shape, no results.jsonl, a torn or short results.jsonl.
    """
    doc = _read_bundle(bundle_path)
    _check_bundle(doc, bundle_path)
    results = bundle_path.parent / "results.jsonl"
    if not results.is_file():
        raise NelError(f"{bundle_path}: a half-written run: expected results.jsonl next to the bundle, "
                       "found none")
    rows = _read_results(results, doc["n_results"])
    cfg = doc.get("config") if isinstance(doc.get("config"), Mapping) else {}
    name = doc["benchmark"]["name"]
    mid = cfg.get("model")
    model_id = str(mid) if mid else None
    key = slugify(model) if model else slugify(model_id or "model")
    sh = cfg.get("shard") if isinstance(cfg.get("shard"), Mapping) else None
    shard = (int(sh["idx"]), int(sh["total"])) if sh and "idx" in sh and "total" in sh else None
    run_id = doc.get("run_id") if isinstance(doc.get("run_id"), str) else None
    table = rows_to_table([_nel_row(r, benchmark=name, model=key, model_id=model_id, run_id=run_id,
                                    shard=shard[0] if shard else 0) for r in rows])
    h = hashlib.sha256(bundle_path.read_bytes())
    h.update(results.read_bytes())
    return NemoBench(benchmark=name, model=key, model_id=model_id, table=table, bundle=doc,
                     source=bundle_path, shard=shard, digest=h.hexdigest()[:16])


def with_shard(b: NemoBench, idx: int, total: int) -> NemoBench:
    """``b`` as shard ``idx`` of ``total`` (its rows' ``shard`` column too)."""
    b.shard = (idx, total)
    b.table = b.table.set_column(b.table.schema.get_field_index("shard"), "shard",
                                 pa.array([idx] * b.table.num_rows, pa.int32()))
    return b


def _newest_bundle(d: Path) -> Path | None:
    """The newest NeMo Evaluator bundle of a benchmark dir (each `eval merge` adds one; the
    timestamp in ``eval-<ts>-<bench>.json`` orders them)."""
    found = sorted(d.glob("eval-*.json"))
    return found[-1] if found else None


def _looks_like_bench_dir(d: Path) -> bool:
    return d.is_dir() and ((d / "results.jsonl").is_file() or any(d.glob("eval-*.json")))


def _found(path: Path) -> str:
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    except OSError as exc:
        return f"an unreadable directory ({exc.strerror})"
    if not names:
        return "an empty directory"
    more = f" and {len(names) - _FOUND_SHOWN} more" if len(names) > _FOUND_SHOWN else ""
    return ", ".join(names[:_FOUND_SHOWN]) + more


def _neither(path: Path) -> NelError:
    return NelError(f"{path}: neither a nel output directory (<bench>/shard_results/) nor a NeMo "
                    f"Evaluator 0.3.0 output (<bench>/eval-*.json with results.jsonl); found {_found(path)}")


def nemo_bench_dirs(root: Path) -> tuple[list[Path], dict[int, list[Path]]]:
    """The benchmark directories of a NeMo Evaluator output: ``(whole, {shard: dirs})``.

    ``whole`` are ``root`` itself (a benchmark dir given directly) or ``root/<bench>/``;
    shards are ``root/shard_<N>/<bench>/`` (or ``root/shard_<N>`` holding the files).
    """
    if _looks_like_bench_dir(root):
        return [root], {}
    whole = sorted(d for d in root.iterdir() if _looks_like_bench_dir(d) and not _SHARD_DIR.match(d.name))
    shards: dict[int, list[Path]] = {}
    for d in sorted(root.iterdir()):
        m = _SHARD_DIR.match(d.name)
        if m and d.is_dir():
            subs = [d] if _looks_like_bench_dir(d) else sorted(x for x in d.iterdir() if _looks_like_bench_dir(x))
            shards[int(m.group(1))] = subs
    return whole, shards


def _bench_of(d: Path, model: str | None) -> NemoBench:
    bundle = _newest_bundle(d)
    if bundle is None:
        raise NelError(f"{d}: a half-written run: expected an eval-*.json bundle next to results.jsonl, "
                       "found none (the run did not finish)")
    return read_nemo_bench(bundle, model=model)


def load_nemo_benches(path: str | Path, *, model: str | None = None,
                      combine_shards: bool = True) -> list[NemoBench]:
    """Every benchmark of a NeMo Evaluator output: a bundle file, a benchmark dir, a run dir,
    or a sharded run's dir (``shard_<N>/``).

    Args:
        path: The file or directory.
        model: Model key to record (default: each bundle's ``config.model``, slugified).
        combine_shards: For a sharded dir without a merged ``<bench>/``: one ``NemoBench``
            per benchmark with every shard's rows (True), or one per shard (False, for
            ``eval merge`` and imports, which keep shards apart).

    Raises:
        NelError: Nothing of NeMo Evaluator's there, a half-written or torn run, a bundle
            of an unknown version or shape, or the same sample in two shards.
    """
    p = Path(path).expanduser().resolve()
    if p.is_file():
        return [read_nemo_bench(p, model=model)]
    if not p.is_dir():
        raise NelError(f"no such file or directory: {p}")
    whole, shards = nemo_bench_dirs(p)
    if not whole and not any(shards.values()):
        raise _neither(p)
    out = [_bench_of(d, model) for d in whole]
    per_shard = []
    for i in sorted(shards):
        for d in shards[i]:
            b = _bench_of(d, model)
            # the directory's N is the shard (as NeMo Evaluator's merge reads it); the total
            # is what the process recorded, else the number of shard directories
            per_shard.append(with_shard(b, i, b.shard[1] if b.shard else max(shards) + 1))
    if not combine_shards:
        # a benchmark's shards stand for it; NeMo Evaluator's merged copy is derived from them
        sharded = {b.benchmark for b in per_shard}
        return [b for b in out if b.benchmark not in sharded] + per_shard
    merged = {b.benchmark for b in out}
    pending = [b for b in per_shard if b.benchmark not in merged]
    groups: dict[tuple[str, str], list[NemoBench]] = {}
    for b in pending:
        groups.setdefault((b.benchmark, b.model), []).append(b)
    for parts in groups.values():
        out.append(_concat(parts))
    return out


def _concat(parts: list[NemoBench]) -> NemoBench:
    """One benchmark from its shards' outputs; the same sample in two shards is refused."""
    if len(parts) == 1:
        return parts[0]
    seen: dict[str, Path] = {}
    for b in parts:
        for sid in b.table.column("sample_id").to_pylist():
            if sid in seen:
                raise NelError(f"{b.benchmark}: sample {sid} (problem:repeat) is in two shards "
                               f"({seen[sid].parent} and {b.source.parent}): were they run with "
                               "different shard counts?")
            seen[sid] = b.source
    h = hashlib.sha256("".join(b.digest for b in parts).encode())
    first = parts[0]
    return NemoBench(benchmark=first.benchmark, model=first.model, model_id=first.model_id,
                     table=pa.concat_tables([b.table for b in parts]), bundle=first.bundle,
                     source=first.source.parent.parent, shard=None, digest=h.hexdigest()[:16])


def detect(path: str | Path) -> str:
    """Which tool wrote ``path``: ``"nel"`` (an output dir with a Parquet store), ``"nel-bundle"``
    (a ``bundle.json`` or a nel export inside a store), ``"nemo"`` (NeMo Evaluator 0.3.0
    files), or ``"other"`` (an eval JSON of neither shape, read by the generic loader).

    Raises:
        NelError: A missing path, or a directory that is neither tool's output.
    """
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise NelError(f"no such file or directory: {p}")
    if p.is_dir():
        if any((d / "shard_results").is_dir() for d in p.iterdir()) or (p / "shard_results").is_dir():
            return "nel"
        whole, shards = nemo_bench_dirs(p)
        if whole or any(shards.values()):
            return "nemo"
        raise _neither(p)
    if p.name == "bundle.json":
        return "nel-bundle"
    # nel's export of a store (<out>/<bench>/exports/<model>/eval-*.json), whatever keys it
    # shares with NeMo Evaluator's bundle: the store's own bundle stands behind it
    if p.name.startswith("eval-") and p.parent.parent.name == "exports" \
            and (p.parents[2] / "bundle" / f"model={p.parent.name}" / "bundle.json").is_file():
        return "nel-bundle"
    doc = _read_bundle(p)
    if is_nemo_bundle(doc):
        return "nemo"
    return "other"


def nel_bundle(nb: NemoBench) -> dict[str, Any]:
    """nel's bundle for a NeMo Evaluator benchmark, computed from its per-item rewards as for
    a nel run (the same intervals, pass@k and runtime numbers), naming where it came from."""
    from nel_assets.engine.results.bundle import build_bundle

    version = nb.bundle.get("sdk_version")
    return build_bundle(nb.table, benchmark=nb.benchmark, model=nb.model, model_id=nb.model_id,
                        extra={"source_tool": f"nemo-evaluator {version}", "source": str(nb.source),
                               "source_run_id": nb.bundle.get("run_id"), "complete": True})


def store_nemo_benches(benches: list[NemoBench], root: str | Path) -> list[tuple[str, str]]:
    """Commit NeMo Evaluator benchmarks into nel's result store at ``root`` as shard partitions
    (``<bench>/shard_results/model=<m>/shard=<s>/``, with their commit markers), one per
    shard process, or shard 0 of 1 for a whole run.

    Call it only after every input was read and checked (``load_nemo_benches``), so bad input
    writes nothing. Returns the ``(benchmark, model)`` pairs written.

    Raises:
        NelError: The same (benchmark, model, shard) twice in ``benches``.
    """
    from nel_resources.storage.store import ResultStore

    seen: dict[tuple[str, str, int], Path] = {}
    for b in benches:
        key = (b.benchmark, b.model, b.shard[0] if b.shard else 0)
        if key in seen:
            raise NelError(f"{b.benchmark}/{b.model} shard {key[2]} twice: {seen[key]} and {b.source}")
        seen[key] = b.source
    store = ResultStore(root)
    pairs: list[tuple[str, str]] = []
    for b in benches:
        idx, total = b.shard or (0, 1)
        store.write_shard(b.benchmark, b.model, idx, b.table, {
            "data_version": b.digest, "total": total, "n_rows": b.table.num_rows,
            "imported_from": str(b.source), "source_tool": f"nemo-evaluator {b.bundle.get('sdk_version')}",
            "source_run_id": b.bundle.get("run_id")})
        if (b.benchmark, b.model) not in pairs:
            pairs.append((b.benchmark, b.model))
    return pairs
