"""Load an evaluation run for comparison, gating and reports, wherever it came from.

A *run* is one model's results on one or more benchmarks, with per-item scores (what a paired
comparison needs), per-sample runtime numbers and a few sample texts for flip examples.
Three sources are understood:

* a **nel output directory** (the Parquet store): per-item data is recomputed from the shard
  Parquet with ``stats.item_table``, so the bundle never has to carry it. An output dir may
  hold several models; the caller picks one (``model=``), the only one is the default.
* a **nel bundle file** (``<out>/<bench>/bundle/model=<m>/bundle.json``): the store it sits
  in provides the per-item rows.
* **NeMo Evaluator 0.3.0 files**: an ``eval-*.json`` with a ``results.jsonl`` next to it (a
  file, its directory, a run directory, or a sharded run's ``shard_<N>/`` layout), read and
  checked by ``nemo_results``. nel's own exports load the same way (``<out>/<bench>/``, or
  ``<out>/<bench>/models/<model>/`` with several models), and so do eval JSONs of other
  harnesses' field names.

``compare_runs`` pairs two runs benchmark by benchmark and ``write_regression`` writes the
``regression.json`` artifact. No Dagster import here.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.errors import NelError
from nel_assets.engine import stats
from nel_assets.engine.nemo import nemo_regression
from nel_assets.engine.nemo.nemo_results import benchmark_name
from nel_assets.engine.results.provenance import with_provenance_differences
from nel_assets.engine.verdicts.compare import compare_scores
from nel_assets.engine.verdicts.drop_units import check_drop_units
from nel_assets.engine.verdicts.nemo_compare_rules import API_MIN_EFFECT, compare_verdict
from nel_assets.engine.verdicts.outcome import worst
from nel_assets.engine.verdicts.runtime_delta import runtime_delta
from nel_resources.storage.arrow import pa
from nel_resources.storage.store import ResultStore, write_json_atomic

__all__ = [
    "BenchRun",
    "Run",
    "check_drop_units",
    "compare_runs",
    "items_to_detect",
    "list_models",
    "load_run",
    "run_from_store",
    "write_regression",
]

REGRESSION_VERSION = 1
_SAMPLE_TEXT_CAP = 600  # characters kept per text field in flip examples (regression.json)

# NeMo Evaluator / generic results.jsonl field names, most specific first.
_KEY_FIELDS = ("problem_idx", "problem_id", "item_id", "question_id", "doc_id", "idx", "index", "id")
_SCORE_FIELDS = ("reward", "score", "correct", "is_correct", "accuracy", "acc", "exact_match")
_REPEAT_FIELDS = ("repeat", "sample_idx", "repeat_idx", "attempt")
_LATENCY_FIELDS = ("model_ms", "latency_ms")


@dataclass
class BenchRun:
    """One benchmark of a run.

    Attributes:
        benchmark: The benchmark name (as the run recorded it).
        model: The model key (partition slug, or the name the file gave).
        model_id: The served model name, when known.
        items: Per-item table in ``stats.item_table`` form (the input of ``compare_scores``).
        runtime: Per-sample arrays for ``runtime_delta`` (``model_ms``, ``completion_tokens``).
        samples: Item key (as a string) -> one sample's texts, for flip examples.
        bundle: The nel bundle when one exists (None for foreign files).
        source: Where this benchmark was read from.
        scores: ``benchmark.scores`` of the ``eval-*.json`` it was read from (None for a
            nel store run); NeMo Evaluator's gate falls back on them with few items.
    """

    benchmark: str
    model: str
    model_id: str | None
    items: dict[str, Any]
    runtime: dict[str, np.ndarray]
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)
    bundle: dict[str, Any] | None = None
    source: str = ""
    scores: dict[str, Any] | None = None

    @property
    def n_items(self) -> int:
        """Items with at least one scored sample."""
        return len(self.items["items"])


@dataclass
class Run:
    """A model's results on several benchmarks, keyed by benchmark name."""

    source: Path
    kind: str  # "nel", "bundle" or "nemo"
    model: str
    model_id: str | None
    benchmarks: dict[str, BenchRun]

    def describe(self) -> dict[str, Any]:
        """JSON-ready identity of the run (what regression.json records for each side)."""
        return {"source": str(self.source), "kind": self.kind, "model": self.model,
                "model_id": self.model_id, "benchmarks": sorted(self.benchmarks)}


# --------------------------------------------------------------------------- nel store


def _sample_texts(row: Mapping[str, Any]) -> dict[str, Any]:
    def cap(v: Any) -> Any:
        return v[:_SAMPLE_TEXT_CAP] if isinstance(v, str) else v

    return {k: cap(row.get(k)) for k in ("sample_id", "prompt", "expected", "response",
                                         "extracted", "reward", "failure_category")}


def _runtime_arrays(model_ms: Iterable[Any], tokens: Iterable[Any], ok: np.ndarray) -> dict[str, np.ndarray]:
    """Latency and output tokens of successful requests (a failed request has no latency
    that means anything for the model's speed)."""
    ms = stats.units._as_float(list(model_ms))
    tok = stats.units._as_float(list(tokens))
    return {"model_ms": ms[ok], "completion_tokens": tok[ok]}


def bench_run_from_table(table: pa.Table, *, benchmark: str, model: str, model_id: str | None,
                         bundle: dict[str, Any] | None, source: str) -> BenchRun:
    """A ``BenchRun`` from nel result rows (the store's schema).

    Args:
        table: Result rows of one (benchmark, model).
        benchmark: Benchmark name.
        model: Model key.
        model_id: Served model name.
        bundle: The stored bundle, if any.
        source: Description of where the rows came from.

    Returns:
        The benchmark run, per-item data keyed by ``problem_idx``.
    """
    cols = set(table.column_names)

    def col(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in cols else [None] * table.num_rows

    cat, clus = col("category"), col("cluster")
    items = stats.item_table(
        np.asarray(col("problem_idx"), dtype=np.int64), col("reward"),
        cluster=np.asarray(clus, dtype=object) if any(c is not None for c in clus) else None,
        category=np.asarray(cat, dtype=object) if any(c is not None for c in cat) else None,
    )
    ok = np.array([e is None for e in col("error")], dtype=bool)
    runtime = _runtime_arrays(col("model_ms"), col("completion_tokens"), ok)
    samples: dict[str, dict[str, Any]] = {}
    wanted = ("sample_id", "prompt", "expected", "response", "extracted", "reward",
              "failure_category", "problem_idx", "repeat")
    rows = table.select([c for c in wanted if c in cols]).to_pylist()
    for r in rows:
        key = str(r.get("problem_idx"))
        # the first repeat stands for the item; a later repeat never overwrites it
        if key not in samples or (r.get("repeat") or 0) < (samples[key].get("_repeat") or 0):
            samples[key] = {**_sample_texts(r), "_repeat": r.get("repeat") or 0}
    for s in samples.values():
        s.pop("_repeat", None)
    return BenchRun(benchmark=benchmark, model=model, model_id=model_id, items=items,
                    runtime=runtime, samples=samples, bundle=bundle, source=source)


def list_models(path: str | Path) -> list[str]:
    """Every model key with results in a nel output directory (sorted)."""
    store = ResultStore(path)
    return sorted({m for b in store.benchmarks() for m in store.models(b)})


def run_from_store(store: ResultStore, model: str, *, benchmarks: Iterable[str] | None = None,
                   kind: str = "nel", source: Path | None = None) -> Run:
    """Load one model's run from a result store.

    Args:
        store: The output directory's store.
        model: Model key (partition slug).
        benchmarks: Benchmark folders to load (default: all with results for ``model``).
        kind: Recorded source kind.
        source: Recorded source path (default: the store root).

    Returns:
        The run; benchmarks without rows for ``model`` are absent.
    """
    out: dict[str, BenchRun] = {}
    model_id = None
    for folder in benchmarks if benchmarks is not None else store.benchmarks():
        table = store.read_shards(folder, model)
        if table.num_rows == 0:
            continue
        bundle = store.read_bundle(folder, model)
        names = [n for n in table.column("benchmark").to_pylist() if n]
        name = benchmark_name(bundle or {}) or (names[0] if names else folder)
        mids = [m for m in table.column("model_id").to_pylist() if m]
        mid = (bundle or {}).get("model_id") or (mids[0] if mids else None)
        model_id = model_id or mid
        out[name] = bench_run_from_table(table, benchmark=name, model=model, model_id=mid,
                                         bundle=bundle, source=str(store.bench_dir(folder)))
    return Run(source=source or store.root, kind=kind, model=model, model_id=model_id,
               benchmarks=out)


def _pick_model(models: list[str], wanted: str | None, where: Path, flag: str) -> str:
    if wanted is not None:
        from nel_resources.storage.store import slugify

        for cand in (wanted, slugify(wanted)):
            if cand in models:
                return cand
        raise NelError(f"{where}: no results for model {wanted!r} "
                       f"(models here: {', '.join(models) or 'none'})")
    if len(models) == 1:
        return models[0]
    if not models:
        raise NelError(f"{where}: no results found (no shard results, bundle or eval-*.json)")
    raise NelError(f"{where} holds several models ({', '.join(models)}): choose one with {flag}")


# --------------------------------------------------------------------------- NeMo Evaluator files


def _first(d: Mapping[str, Any], names: Iterable[str]) -> Any:
    for n in names:
        if n in d and d[n] is not None:
            return d[n]
    return None


def _score(v: Any) -> float:
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("true", "correct", "yes"):
            return 1.0
        if low in ("false", "incorrect", "no"):
            return 0.0
        try:
            return float(low)
        except ValueError:
            return math.nan
    if isinstance(v, Mapping):  # e.g. {"score": 1.0} or {"value": 1}
        return _score(_first(v, ("score", "value", *_SCORE_FIELDS)))
    return math.nan


def _item_key(r: Mapping[str, Any], line: int) -> Any:
    k = _first(r, _KEY_FIELDS)
    if k is not None:
        return k
    sid = r.get("sample_id")
    if isinstance(sid, str) and ":" in sid:  # nel's "<problem_idx>:<repeat>"
        return sid.rsplit(":", 1)[0]
    return sid if sid is not None else line


def _load_nemo_bench(eval_json: Path, results: Path) -> BenchRun:
    try:
        meta = json.loads(eval_json.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise NelError(f"{eval_json}: not a readable eval JSON: {exc}") from None
    bundle = meta.get("bundle") if isinstance(meta.get("bundle"), dict) else None
    cfg = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    name = (_first(meta, ("benchmark", "task", "task_name", "benchmark_name"))
            or _first(cfg, ("benchmark", "task")) or eval_json.parent.name)
    if isinstance(name, Mapping):  # NeMo Evaluator 0.3.0: `benchmark: {name, scores, ...}`
        name = name.get("name") or _first(cfg, ("benchmark", "task")) or eval_json.parent.name
    # NeMo Evaluator 0.3.0 records the model only in `config.model`
    model = str(_first(meta, ("model", "model_name", "model_id")) or _first(cfg, ("model",)) or "model")
    model_id = _first(meta, ("model_id", "model_name", "model")) or _first(cfg, ("model",))
    keys, scores, cats, clus, ms, tok, ok = [], [], [], [], [], [], []
    samples: dict[str, dict[str, Any]] = {}
    with open(results, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise NelError(f"{results}:{line_no}: invalid JSON: {exc.msg}") from None
            key = _item_key(r, line_no)
            keys.append(str(key))
            # nel's files give a failed request reward 0.0 (0.3.0's tools need a number) and
            # say it failed in `error`: it is no wrong answer
            scores.append(math.nan if r.get("error") is not None else _score(_first(r, _SCORE_FIELDS)))
            cats.append(r.get("category"))
            clus.append(r.get("cluster"))
            usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
            ms.append(_first(r, _LATENCY_FIELDS))
            tok.append(r.get("completion_tokens", usage.get("completion_tokens")))
            ok.append(r.get("error") is None)
            rep = _first(r, _REPEAT_FIELDS) or 0
            if str(key) not in samples or rep == 0:
                samples[str(key)] = _sample_texts({**r, "reward": scores[-1]})
    if not keys:
        raise NelError(f"{results}: no result rows")
    items = stats.item_table(
        np.asarray(keys, dtype=object), scores,
        cluster=np.asarray(clus, dtype=object) if any(c is not None for c in clus) else None,
        category=np.asarray(cats, dtype=object) if any(c is not None for c in cats) else None,
    )
    runtime = _runtime_arrays(ms, tok, np.asarray(ok, dtype=bool))
    return BenchRun(benchmark=str(name), model=model, model_id=None if model_id is None else str(model_id),
                    items=items, runtime=runtime, samples=samples, bundle=bundle,
                    source=str(eval_json.parent), scores=_bundle_scores(meta))


def _bundle_scores(meta: Any) -> dict[str, Any]:
    """An eval JSON's ``benchmark.scores`` (empty when it has none)."""
    bench = meta.get("benchmark") if isinstance(meta, Mapping) else None
    scores = bench.get("scores") if isinstance(bench, Mapping) else None
    return dict(scores) if isinstance(scores, Mapping) else {}


def _nemo_pairs(path: Path) -> list[tuple[Path, Path]]:
    """(eval-*.json, results.jsonl) pairs at or under ``path`` (files of neither tool's
    bundle shape: older exports, other harnesses' field names)."""
    if path.is_file():
        res = path.parent / "results.jsonl"
        if not res.exists():
            raise NelError(f"{path}: no results.jsonl next to it (per-item results are "
                           "needed for a paired comparison)")
        return [(path, res)]
    pairs = []
    for ev in sorted(path.rglob("eval-*.json")):
        res = ev.parent / "results.jsonl"
        if res.exists():
            pairs.append((ev, res))
    return pairs


def _holds_nemo_bundle(path: Path) -> bool:
    """Whether ``path`` is, or holds, a NeMo Evaluator bundle (``sdk_version`` set), or a
    torn eval JSON (``nemo_results`` says what is wrong with it in its own words)."""
    from nel_assets.engine.nemo.nemo_results import is_nemo_bundle

    files = [path] if path.is_file() else sorted(path.rglob("eval-*.json"))
    for f in files:
        try:
            if is_nemo_bundle(json.loads(f.read_text(encoding="utf-8"))):
                return True
        except (UnicodeDecodeError, json.JSONDecodeError):
            return True
        except OSError:
            continue
    return False


def _nemo_benches(path: Path) -> list[BenchRun]:
    """NeMo Evaluator's own files, read and checked by ``nemo_results`` (per-item rows in
    nel's schema, so both tools' runs pair on ``problem_idx``)."""
    from nel_assets.engine.nemo.nemo_results import load_nemo_benches

    out = []
    for nb in load_nemo_benches(path):
        br = bench_run_from_table(nb.table, benchmark=nb.benchmark, model=nb.model, model_id=nb.model_id,
                                  bundle=None, source=str(nb.source.parent))
        br.scores = _bundle_scores(nb.bundle)
        out.append(br)
    return out


# --------------------------------------------------------------------------- entry point


def load_run(path: str | Path, *, model: str | None = None, flag: str = "--model") -> Run:
    """Load a run from a nel output dir, a nel bundle file or NeMo Evaluator files.

    Args:
        path: The directory or file.
        model: Model to pick when the source holds several (slug or service name).
        flag: The CLI flag named in the "several models" error.

    Returns:
        The run.

    Raises:
        NelError: Missing path, no results, an ambiguous or unknown model, unreadable files.
    """
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise NelError(f"no such file or directory: {p}")
    if p.is_file() and p.name == "bundle.json":
        # <out>/<bench>/bundle/model=<m>/bundle.json: the store around it has the rows
        mdir = p.parent
        if not (mdir.name.startswith("model=") and mdir.parent.name == "bundle"):
            raise NelError(f"{p}: not inside a nel output dir (<out>/<bench>/bundle/model=<m>/); "
                           "compare needs the per-item results stored next to the bundle")
        m = mdir.name.split("=", 1)[1]
        store = ResultStore(mdir.parent.parent.parent)
        run = run_from_store(store, m, benchmarks=[mdir.parent.parent.name], kind="bundle", source=p)
        if not run.benchmarks:
            raise NelError(f"{p}: the shard results of this bundle are missing "
                           f"({mdir.parent.parent / 'shard_results' / mdir.name})")
        return run
    if p.is_dir():
        store = ResultStore(p)
        if store.benchmarks():
            return run_from_store(store, _pick_model(list_models(p), model, p, flag))
    if _holds_nemo_bundle(p):
        benches = _nemo_benches(p)
    else:
        pairs = _nemo_pairs(p)
        if not pairs:
            from nel_assets.engine.nemo.nemo_results import load_nemo_benches

            load_nemo_benches(p)  # a half-written NeMo Evaluator run, or neither tool's: its line
            raise NelError(f"{p}: no nel results (shard_results/) and no eval-*.json with a "
                           "results.jsonl found")
        benches = [_load_nemo_bench(ev, res) for ev, res in pairs]
    models = sorted({b.model for b in benches})
    chosen = _pick_model(models, model, p, flag)
    out: dict[str, BenchRun] = {}
    for b in benches:
        if b.model != chosen:
            continue
        if b.benchmark in out:
            raise NelError(f"{p}: benchmark {b.benchmark!r} of model {chosen!r} appears twice "
                           f"({out[b.benchmark].source} and {b.source})")
        out[b.benchmark] = b
    mid = next((b.model_id for b in out.values() if b.model_id), None)
    return Run(source=p, kind="nemo", model=chosen, model_id=mid, benchmarks=out)


# --------------------------------------------------------------------------- compare


def items_to_detect(comp: Mapping[str, Any], effect: float) -> int | None:
    """Paired items needed for a two-sided test to detect ``|effect|`` at the comparison's
    power: the MDE formula solved for n, ``n' = n · (MDE / |effect|)²``."""
    n, m = comp.get("n_paired") or 0, comp.get("mde")
    if not n or not m or not effect:
        return None
    return math.ceil(n * (m / abs(effect)) ** 2)


def _flip_examples(base: BenchRun, cand: BenchRun, comp: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for direction, info in comp["flips"].items():
        ex = []
        for key in info["examples"]:
            k = str(key)
            b, c = base.samples.get(k, {}), cand.samples.get(k, {})
            ex.append({"item": key, "prompt": b.get("prompt") or c.get("prompt"),
                       "expected": b.get("expected") or c.get("expected"),
                       "baseline": {x: b.get(x) for x in ("response", "extracted", "reward")},
                       "candidate": {x: c.get(x) for x in ("response", "extracted", "reward")}})
        out[direction] = ex
    return out


def _as_run(side: Run | str | Path, what: str) -> Run:
    """A run, or the run at a path; a glob (``baseline/eval-*.json``) must match one file."""
    if isinstance(side, Run):
        return side
    text = str(side)
    if any(ch in text for ch in "*?["):
        hits = sorted(glob.glob(os.path.expanduser(text)))
        if len(hits) != 1:
            raise NelError(f"{what} {text!r} matches {len(hits)} files; it must match exactly one"
                           + (f" ({', '.join(map(str, hits[:5]))})" if hits else ""))
        side = hits[0]
    return load_run(side)


def compare_runs(base: Run | str | Path, cand: Run | str | Path, *, max_drop: float | None = None,
                 alpha: float = 0.05, power: float = 0.8, seed: int = 0, n_examples: int = 5,
                 n_permutations: int = 10_000, test: str = "auto",
                 correct_above: float | None = None) -> dict[str, Any]:
    """Paired comparison of two runs, benchmark by benchmark (the ``regression.json`` doc).

    Args:
        base: The baseline run, or its path (an output dir, a bundle, NeMo Evaluator files,
            or a glob matching one of those, as in ``compare_runs("base/eval-*.json", ...)``).
        cand: The candidate run, or its path.
        max_drop: Tolerated drop in score units (0.01 = 1 point); see ``check_drop_units``.
        alpha: Test level and MDE level.
        power: Power for the MDE.
        seed: Permutation-test seed.
        n_examples: Flip examples per direction.
        n_permutations: Sign-flip permutations (non-binary scores).
        test: The paired test (``compare_scores``: auto, mcnemar, sign, permutation).
        correct_above: Score above which an item counts as correct for flips (None: any change).

    Returns:
        ``{version, created_at, baseline, candidate, max_drop, alpha, power, benchmarks:
        {name: compare_scores(...) + runtime + flip_examples + items_to_detect_delta},
        missing: {baseline: [...], candidate: [...]}, regressions, improvements, regression,
        verdict, verdict_reasons, outcome}``. ``verdict`` (= ``outcome``; per benchmark
        ``outcome``, ``outcome_reason`` and ``nemo_verdict``) is NeMo Evaluator's verdict by
        its rules (``nemo_compare_rules.compare_verdict``, with ``max_drop`` as its
        ``min_effect``, 0.005 when None as in its ``compare_runs``), worst first; nel's own
        reading of its interval is the per-benchmark ``verdict``.
        ``missing.baseline`` lists benchmarks the baseline lacks (and vice versa).
    """
    check_drop_units(max_drop)
    base, cand = _as_run(base, "baseline"), _as_run(cand, "candidate")
    shared = sorted(set(base.benchmarks) & set(cand.benchmarks))
    benches: dict[str, Any] = {}
    for name in shared:
        b, c = base.benchmarks[name], cand.benchmarks[name]
        try:
            comp = compare_scores(b.items, c.items, max_drop=max_drop, alpha=alpha, power=power,
                                  seed=seed, n_examples=n_examples, n_permutations=n_permutations,
                                  test=test, correct_above=correct_above)
        except ValueError as exc:
            raise NelError(f"{name}: {exc}") from None
        comp["metric"] = "mean"
        comp["runtime"] = runtime_delta(b.runtime, c.runtime)
        comp["flip_examples"] = _flip_examples(b, c, comp)
        comp["items_to_detect_delta"] = (items_to_detect(comp, comp["delta"])
                                         if comp.get("delta") else None)
        nv = compare_verdict(b.items, c.items, test=test, correct_above=correct_above, alpha=alpha,
                             min_effect=API_MIN_EFFECT if max_drop is None else max_drop)
        comp["nemo_verdict"] = nv
        comp["outcome"], comp["outcome_reason"] = nv["verdict"], "; ".join(nv["verdict_reasons"])
        comp.update(nemo_regression.regression_keys(b.items, c.items, comp))  # NeMo Evaluator's keys too
        benches[name] = comp
    regressions = [n for n, v in benches.items() if v["verdict"] == "regression"]
    overall = worst(v["outcome"] for v in benches.values())
    return with_provenance_differences({
        "version": REGRESSION_VERSION,
        "created_at": time.time(),
        "baseline": base.describe(),
        "candidate": cand.describe(),
        "max_drop": max_drop,
        "alpha": alpha,
        "power": power,
        "benchmarks": benches,
        "missing": {"baseline": sorted(set(cand.benchmarks) - set(base.benchmarks)),
                    "candidate": sorted(set(base.benchmarks) - set(cand.benchmarks))},
        "regressions": regressions,
        "improvements": [n for n, v in benches.items() if v["verdict"] == "improvement"],
        "regression": bool(regressions),
        "outcome": overall,
        "verdict": overall,
        "verdict_reasons": [f"{n}: {v['outcome']}: {v['outcome_reason']}" for n, v in benches.items()],
    }, base, cand)


def write_regression(path: str | Path | Mapping[str, Any],
                     doc: Mapping[str, Any] | str | Path) -> Path:
    """Write ``regression.json`` (atomically). A directory gets ``regression.json`` inside.

    Takes ``(path, doc)`` or NeMo Evaluator's order ``(report, path)``; the mapping is the
    report either way.

    Returns:
        The file written.
    """
    if isinstance(path, Mapping):
        path, doc = doc, path  # type: ignore[assignment]
    if not isinstance(doc, Mapping) or isinstance(path, Mapping):
        raise NelError("write_regression needs one report (a mapping) and one path")
    p = Path(path).expanduser()
    if p.is_dir() or (not p.suffix and not p.exists()):
        p = p / "regression.json"
    # NeMo Evaluator's top-level keys too, where its `compare -o` writes them
    write_json_atomic(p, {**doc, **nemo_regression.single_report_keys(dict(doc))})
    return p


def load_checked_policy(path: str) -> Any:
    """Load a gate policy file, refusing thresholds written in points.

    Raises:
        NelError: one line, for an unreadable or invalid policy or a drop in points.
    """
    from nel_assets.engine.verdicts.gate import PolicyError, load_policy

    try:
        policy = load_policy(path)
    except PolicyError as exc:
        raise NelError(str(exc)) from None
    check_drop_units(policy.defaults.max_drop, f"{path}: defaults.max_drop")
    for name, bp in policy.benchmarks.items():
        check_drop_units(bp.max_drop, f"{path}: benchmarks.{name}.max_drop")
    return policy
