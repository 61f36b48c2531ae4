"""The `every_eval_ever` exporter: a run's results in the Every Eval Ever schema (0.3.0), so they
pool with other tools' results.

Per bundle (benchmark x model) it writes the datastore layout the `every-eval-ever` package's
validator (`eee-validate`) checks, under `<output_dir>/data/<benchmark>/<developer>/<model>/`:

* `<uuid>.json`, an `EvaluationLog`: nel's headline score with its standard error and CI
  (`score_details.uncertainty`), pass@k, maj@k and per-category means, the generation
  settings, nel's version and config fingerprint;
* `<uuid>_samples.jsonl`, one `InstanceLevelEvaluationLog` per sample (problem x repeat):
  the prompt, the expected answer, the response, what the scorer extracted and how, the
  reward, token usage and latency. A failed request is written with score 0, `is_correct`
  false and its `error` (the schema needs a score); nel's aggregate leaves it out.

The `<uuid>` is derived from the benchmark, the model and the run's config fingerprint and
the timestamps from the bundle, so exporting the same evaluation again rewrites the same two
files byte for byte: never a second record. nel does not import `every_eval_ever` (a Python
>= 3.12 package): the files are plain JSON, checked by the package itself in the tests.

Settings (`output.export_config.every_eval_ever`, or `nel export -o KEY=VALUE`):
    output_dir: the datastore root (default `<folder of the bundle>/every_eval_ever/`, or
        `nel export`'s `--output-dir`).
    developer: who made the model, for a model name without an `org/` prefix (the schema
        files records by `<developer>/<model>`; default `local`).
    source_organization_name: who ran the evaluation (default `unknown`).
    evaluator_relationship: first_party, third_party (default), collaborative or other.
    deployment_type: self_deployed, externally_managed or unknown (default: self_deployed
        for a server nel launched, else unknown).
    model_availability: open_weights, closed_weights or unknown (default).
    instance_level: write the samples file (default true).

An export that fails to write (a folder that cannot be written) never loses the evaluation:
the run's files stay, one line says what failed and how to export again, and the exporter
returns 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.exporters.bundle_content import read_bundle, run_root
from nel_resources.storage.store import write_json_atomic

SCHEMA_VERSION = "0.3.0"  # every-eval-ever 0.3.0's eval.schema.json `version`
SETTINGS = ("output_dir", "developer", "source_organization_name", "evaluator_relationship",
            "deployment_type", "model_availability", "instance_level")
_CHOICES = {
    "evaluator_relationship": ("first_party", "third_party", "collaborative", "other"),
    "deployment_type": ("self_deployed", "externally_managed", "unknown"),
    "model_availability": ("open_weights", "closed_weights", "unknown"),
}
_UNSAFE = set('<>:"\\|?*/') | {chr(c) for c in range(32)}
_RUN_SETTINGS = ("repeats", "max_problems", "seed", "system_prompt", "shuffle_seed")


def check_settings(settings: dict[str, Any]) -> str | None:
    """What is wrong with the settings, in one line, or None (the config check asks this)."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        return (f"every_eval_ever exporter: unknown setting {unknown[0]!r}; the settings are "
                f"{', '.join(SETTINGS)}")
    for key, allowed in _CHOICES.items():
        if key in settings and settings[key] not in allowed:
            return f"every_eval_ever exporter: {key} {settings[key]!r}: write one of {', '.join(allowed)}"
    dev = settings.get("developer")
    if dev is not None and (not isinstance(dev, str) or not _safe_component(dev)):
        return (f"every_eval_ever exporter: developer {dev!r}: write an organization name usable "
                "as a folder name (no '/', not 'unknown' or 'data')")
    if not isinstance(settings.get("instance_level", True), bool):
        return "every_eval_ever exporter: instance_level: write true or false"
    return None


def export(bundles: list[Path], settings: dict[str, Any], output_dir: str | None = None) -> int:
    """Write one Every Eval Ever record (aggregate + samples) per bundle; 0 when all were written.

    Args:
        bundles: `eval-*.json` files, each with its `results.jsonl` beside it.
        settings: The exporter's settings (see the module doc).
        output_dir: The datastore root, when `settings` names no `output_dir`.

    Raises:
        NelError: bad settings, or a bundle that cannot be read or lacks its results (one line).
    """
    problem = check_settings(settings)
    if problem is not None:
        raise NelError(problem)
    status = 0
    for path in bundles:
        dest = settings.get("output_dir") or output_dir
        root = Path(dest) if dest else path.parent / "every_eval_ever"
        try:
            write_record(path, root, settings)
        except OSError as exc:
            _say_failed(f"{type(exc).__name__}: {exc}", path, dest)
            status = 1
    return status


def write_record(bundle_path: Path, root: Path, settings: dict[str, Any]) -> tuple[Path, Path | None]:
    """The record of one bundle, written under the datastore root `root`: (aggregate, samples)."""
    results = bundle_path.parent / "results.jsonl"
    if not results.is_file():
        raise NelError(f"{bundle_path}: no results.jsonl beside it (the samples of the record)")
    doc = read_bundle(bundle_path)
    log = evaluation_log(doc, settings)
    bench, model_id = log["evaluation_results"][0]["evaluation_name"], log["model_info"]["id"]
    developer, model = _path_parts(model_id, log["model_info"].get("developer"))
    folder = root / "data" / _component(bench) / developer / model
    file_uuid = _record_uuid(doc, bench, model_id)
    aggregate = folder / f"{file_uuid}.json"
    samples: Path | None = None
    folder.mkdir(parents=True, exist_ok=True)
    if settings.get("instance_level", True):
        samples = folder / f"{file_uuid}_samples.jsonl"
        result_id = log["evaluation_results"][0]["evaluation_result_id"]
        digest, rows = _write_samples(samples, _instance_rows(results, log, result_id))
        log["detailed_evaluation_results"] = {
            "format": "jsonl", "file_path": "/".join(("data", *samples.relative_to(root / "data").parts)),
            "hash_algorithm": "sha256", "checksum": digest, "total_rows": rows}
    write_json_atomic(aggregate, log)
    return aggregate, samples


def evaluation_log(doc: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The aggregate `EvaluationLog` (as JSON) of a bundle document."""
    bundle = doc.get("bundle") if isinstance(doc.get("bundle"), dict) else {}
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    score = bundle.get("score") if isinstance(bundle.get("score"), dict) else {}
    bench = str(bundle.get("benchmark") or (doc.get("benchmark") or {}).get("name") or config.get("benchmark") or "?")
    model_key = str(doc.get("model") or bundle.get("model") or "?")
    model_id = str(doc.get("model_id") or bundle.get("model_id") or config.get("model") or model_key)
    gen = doc.get("generator") if isinstance(doc.get("generator"), dict) else {}
    created = bundle.get("created_at")
    ts = str(int(created)) if isinstance(created, int | float) else str(doc.get("timestamp") or "0")
    developer = model_id.split("/", 1)[0] if "/" in model_id else settings.get("developer") or "local"
    generation = _generation(config)
    results = [_result(bench, "score", score, ts, generation)]
    for kind, metric in (("pass_at_k", "pass_at_k"), ("maj_at_k", "maj_at_k")):
        for k, entry in sorted((score.get(kind) or {}).items(), key=lambda kv: int(kv[0])):
            results.append(_result(bench, f"{metric.removesuffix('_k')}_{k}", entry, ts, generation,
                                   metric_id=metric, k=int(k)))
    for cat, entry in sorted((bundle.get("per_category") or {}).items()):
        results.append(_result(bench, f"category:{cat}", entry, ts, generation, category=str(cat)))
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": f"{bench}/{model_id.replace('/', '_')}/{ts}",
        "evaluation_timestamp": ts,
        "retrieved_timestamp": ts,  # the bundle's time: a re-export writes the same bytes
        "source_metadata": {
            "source_name": "nel", "source_type": "evaluation_run",
            "source_organization_name": str(settings.get("source_organization_name") or "unknown"),
            "evaluator_relationship": settings.get("evaluator_relationship") or "third_party",
            "additional_details": {"nel_run_id": str(doc.get("run_id") or ""), "nel_model": model_key},
        },
        "eval_library": {"name": "nel", "version": str(gen.get("version") or "unknown"),
                         "additional_details": _strings({"config_hash": doc.get("config_hash"),
                                                         "sdk_version": doc.get("sdk_version")})},
        "model_info": {
            "name": model_id, "id": model_id, "developer": developer,
            "additional_details": {
                "deployment_type": settings.get("deployment_type") or _deployment(doc, model_key),
                "model_availability": settings.get("model_availability") or "unknown"},
        },
        "evaluation_results": results,
    }


def _result(bench: str, name: str, entry: Any, ts: str, generation: dict[str, Any] | None, *,
            metric_id: str | None = None, k: int | None = None, category: str | None = None) -> dict[str, Any]:
    """One `EvaluationResult`: a mean with its standard error and confidence interval."""
    e = entry if isinstance(entry, dict) else {}
    binary = bool(e.get("binary", True))
    metric: dict[str, Any] = {
        "evaluation_description": f"nel {name} of {bench}",
        "metric_id": metric_id or ("accuracy" if binary else "mean_reward"),
        "metric_name": f"{name.split('_', 1)[0]}@{k}" if k is not None else name,
        "metric_kind": "pass_rate" if metric_id else ("accuracy" if binary else "mean"),
        "metric_unit": "proportion", "lower_is_better": False,
        "score_type": "continuous", "min_score": 0.0, "max_score": 1.0,
    }
    if k is not None:
        metric["metric_parameters"] = {"k": float(k)}
    if category is not None:
        metric["additional_details"] = {"category": category}
    uncertainty: dict[str, Any] = {}
    if _num(e.get("se")):
        uncertainty["standard_error"] = {"value": float(e["se"]), "method": str(e.get("se_method") or "clt")}
    if _num(e.get("ci_low")) and _num(e.get("ci_high")):
        uncertainty["confidence_interval"] = {
            "lower": float(e["ci_low"]), "upper": float(e["ci_high"]),
            "confidence_level": float(e.get("level") or 0.95), "method": str(e.get("ci_method") or "")}
    n = e.get("n_items", e.get("n"))
    if isinstance(n, int):
        uncertainty["num_samples"] = n  # the SE is over items (repeats averaged first)
    details = _strings({"n_samples": e.get("n_samples"), "n_repeats": e.get("n_repeats"),
                        "n_failed_samples": e.get("n_failed_samples")})
    out: dict[str, Any] = {
        "evaluation_result_id": f"{bench}:{name}",
        "evaluation_name": bench,
        "source_data": {"dataset_name": bench, "source_type": "other"},
        "evaluation_timestamp": ts,
        "metric_config": metric,
        "score_details": {"score": float(e["mean"]) if _num(e.get("mean")) else 0.0,
                          **({"details": details} if details else {}),
                          **({"uncertainty": uncertainty} if uncertainty else {})},
    }
    if generation:
        out["generation_config"] = generation
    return out


def _generation(config: dict[str, Any]) -> dict[str, Any] | None:
    args = {k: float(config[k]) for k in ("temperature", "top_p") if _num(config.get(k))}
    if isinstance(config.get("max_tokens"), int) and config["max_tokens"] >= 1:
        args["max_tokens"] = config["max_tokens"]
    details = _strings({k: config.get(k) for k in _RUN_SETTINGS})
    out: dict[str, Any] = {}
    if args:
        out["generation_args"] = args
    if details:
        out["additional_details"] = details
    return out or None


def _instance_rows(results: Path, log: dict[str, Any], result_id: str) -> Iterator[dict[str, Any]]:
    """One `InstanceLevelEvaluationLog` per `results.jsonl` row, streamed."""
    bench = log["evaluation_results"][0]["evaluation_name"]
    base = {"schema_version": SCHEMA_VERSION, "evaluation_id": log["evaluation_id"],
            "model_id": log["model_info"]["id"], "evaluation_name": bench,
            "evaluation_result_id": result_id}
    with open(results, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield {**base, **_instance(json.loads(line), bench)}


def _instance(r: dict[str, Any], bench: str) -> dict[str, Any]:
    prompt = "" if r.get("prompt") is None else str(r["prompt"])
    expected = r.get("expected_answer", r.get("expected"))
    reference = [str(x) for x in expected] if isinstance(expected, list) else ([] if expected is None else [str(expected)])
    response = r.get("model_response", r.get("response"))
    reward = r.get("reward")
    error = r.get("error")
    scored = _num(reward) and error is None
    extracted = r.get("extracted_answer", r.get("extracted"))
    details = r.get("scoring_details") if isinstance(r.get("scoring_details"), dict) else {}
    out: dict[str, Any] = {
        "sample_id": f"{bench}_{r.get('problem_idx')}",
        "sample_hash": hashlib.sha256((prompt + "".join(reference)).encode()).hexdigest(),
        "interaction_type": "single_turn",
        "input": {"raw": prompt, "reference": reference},
        "output": {"raw": ["" if response is None else str(response)],
                   **({"reasoning_trace": [str(r["reasoning"])]} if r.get("reasoning") else {})},
        "answer_attribution": [] if extracted is None else [{
            "turn_idx": 0, "source": "output.raw", "extracted_value": str(extracted),
            "extraction_method": str(r.get("method") or details.get("method") or "nel"), "is_terminal": True}],
        "evaluation": {"score": float(reward) if scored else 0.0,
                       "is_correct": bool(scored and float(reward) >= 1.0)},
        "metadata": {"problem_idx": r.get("problem_idx"), "repeat": r.get("repeat"),
                     "category": r.get("category"), "scoring_details": details or None,
                     "failure_category": r.get("failure_category")},
    }
    pt, ct = r.get("prompt_tokens"), r.get("completion_tokens")
    if isinstance(pt, int) and isinstance(ct, int) and pt >= 0 and ct >= 0:
        out["token_usage"] = {"input_tokens": pt, "output_tokens": ct, "total_tokens": pt + ct}
    ms = r.get("model_ms", r.get("latency_ms"))
    if _num(ms) and ms >= 0:
        out["performance"] = {"latency_ms": float(ms)}
    if error is not None:
        out["error"] = str(error)
    return out


def _write_samples(path: Path, rows: Iterator[dict[str, Any]]) -> tuple[str, int]:
    """Write the JSONL to a temp name, then rename; (sha256 of the file, rows)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    h, n = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as fh:
            for row in rows:
                data = (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode()
                h.update(data)
                fh.write(data)
                n += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return h.hexdigest(), n


def _record_uuid(doc: dict[str, Any], bench: str, model_id: str) -> str:
    """A UUID4-shaped id fixed by the evaluation (benchmark, model, config fingerprint, nel's
    model key): the same evaluation exported again lands in the same files."""
    key = json.dumps([bench, model_id, str(doc.get("model") or ""), str(doc.get("config_hash") or "")])
    raw = bytearray(hashlib.sha256(key.encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(raw)))


def _deployment(doc: dict[str, Any], model_key: str) -> str:
    """`self_deployed` when nel launched the model's server, else unknown (an `api` URL may
    be anyone's)."""
    services = ((doc.get("nel_config") or {}).get("services") or {}) if isinstance(doc.get("nel_config"), dict) else {}
    svc = services.get(model_key) if isinstance(services, dict) else None
    kind = svc.get("type") if isinstance(svc, dict) else None
    return "unknown" if kind in (None, "api") else "self_deployed"


def _path_parts(model_id: str, developer: str | None) -> tuple[str, str]:
    """The datastore's `<developer>/<model>` folders (the package's `datastore_path_components`
    rule: an `org/` prefix is the developer, the rest flattened with `_`)."""
    if "/" in model_id:
        dev, rest = model_id.split("/", 1)
        return _component(dev), "_".join(_component(p) for p in rest.split("/"))
    return _component(developer or "local"), _component(model_id)


def _component(text: str) -> str:
    s = "".join("_" if ch in _UNSAFE else ch for ch in str(text).replace(":", "_")).rstrip(". ") or "_"
    return s if s not in {"data", ".", ".."} else f"{s}_"


def _safe_component(text: str) -> bool:
    return bool(text.strip()) and text.lower() not in ("unknown", "data") and _component(text) == text


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _strings(d: dict[str, Any]) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in d.items() if v not in (None, "")}


def _say_failed(what: str, bundle_path: Path, dest: str | None) -> None:
    """The one line of a failed export: what failed, that the results stay, how to retry."""
    root = run_root(bundle_path)
    again = f"nel export {root} --dest every_eval_ever" + (f" --output-dir {dest}" if dest else "")
    line = (f"every_eval_ever export failed: {what}; the results are kept in {root}; "
            f"export them again with `{again}`")
    print(line, file=sys.stderr, flush=True)
    # During `nel eval run` stderr is the run's log file; the user must see this line too.
    if sys.stderr is not sys.__stderr__ and sys.__stderr__ is not None:
        print(line, file=sys.__stderr__, flush=True)
