"""What an exporter logs for one bundle, whatever the tracker: params, metrics, step, files.

Pure (no tracker package): it reads the `eval-*.json` document nel wrote for a (benchmark,
model) and the files around it. The MLflow and W&B exporters both log this content; each adds
its own naming (MLflow tags, W&B run id). `BundleContent.key` is a hash of the benchmark, the
model and every param: the same evaluation finds its run again on re-export, a changed one
(other generation settings, another endpoint) gets a new run.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks.errors import NelError
from nel_resources.exporters.steps import checkpoint_family_step, checkpoint_step

BUNDLE_ARTIFACT = "eval.json"  # the run's copy of the `eval-*.json` bundle (see `_artifacts`)
_PARAM_MAX = 6000  # MLflow's longest param value (W&B takes longer ones; one limit for both)
_KEY_MAX = 250
_BAD_KEY_CHARS = re.compile(r"[^/\w.\- ]")
# 0.3.0's files beside a bundle: `only_required` logs the bundle and its results (as 0.3.0
# does), the others only with `only_required: false`.
_REQUIRED = ("results.jsonl",)  # and the bundle itself
_OPTIONAL = ("trajectories.jsonl", "runtime_stats.json", "failure_analysis.json")
_EXCLUDED = ("*cache*", "*.db", "*.lock")  # 0.3.0's exclusions (plus the user's patterns)
# The generation settings nel writes into the bundle's 0.3.0 `config` (`nemo_format.run_config`).
_RUN_PARAMS = ("repeats", "max_problems", "temperature", "top_p", "max_tokens", "seed",
               "system_prompt", "shuffle_seed", "base_url")


class ContentSettings(Protocol):
    """The exporter settings the content depends on (MLflow's and W&B's settings have them)."""

    extra_metadata: dict[str, Any] | None
    log_config_params: bool
    log_config_params_max_depth: int
    copy_artifacts: bool
    only_required: bool
    copy_logs: bool
    exclude_patterns: list[str]


@dataclass
class BundleContent:
    """One bundle's evaluation, ready for a tracker to log."""

    benchmark: str
    model: str
    step: int
    key: str
    params: dict[str, str]
    metrics: dict[str, float]
    job_id: str = ""
    artifacts: list[tuple[Path, str]] = field(default_factory=list)  # (file, its path in the run)
    # What was evaluated, in short (weights, chat template, dataset, server): MLflow tags.
    provenance_tags: dict[str, str] = field(default_factory=dict)


def metric_key(name: str) -> str:
    """A metric or param key MLflow and W&B accept (0.3.0's spelling: pass@1 -> pass_at_1)."""
    s = _BAD_KEY_CHARS.sub("_", name.replace("pass@", "pass_at_").replace("maj@", "maj_at_"))
    return re.sub(r"_+", "_", s).strip()[:_KEY_MAX] or "key"


def bundle_content(doc: dict[str, Any], bundle_path: Path, settings: ContentSettings) -> BundleContent:
    """What to log for the bundle document `doc` read from `bundle_path`."""
    bundle = doc.get("bundle") if isinstance(doc.get("bundle"), dict) else {}
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    bench = str(bundle.get("benchmark") or (doc.get("benchmark") or {}).get("name") or config.get("benchmark") or "?")
    model = str(doc.get("model") or bundle.get("model") or config.get("model") or "?")
    model_id = doc.get("model_id") or bundle.get("model_id") or config.get("model")
    step = _step(doc, model, model_id)
    params = _params(doc, config, bench, model, model_id, settings)
    prov = bundle.get("provenance") if isinstance(bundle.get("provenance"), dict) else {}
    # The provenance is part of the run's identity (other weights or template: another run).
    params.update({metric_key(k): _param_value(v) for k, v in _flatten(prov, "provenance", 6).items()
                   if v not in (None, "", "null")})
    key = hashlib.sha256(json.dumps([bench, model, params], sort_keys=True).encode()).hexdigest()[:32]
    return BundleContent(
        benchmark=bench, model=model, step=step, key=key, params=params,
        metrics=_metrics(doc, bundle), job_id=str(doc.get("run_id") or ""),
        artifacts=_artifacts(bundle_path, model, settings) if settings.copy_artifacts else [],
        provenance_tags=provenance_tags(prov))


def provenance_tags(prov: dict[str, Any]) -> dict[str, str]:
    """The provenance fields a tracker shows at a glance (MLflow tags), known ones only."""
    served = prov.get("served") if isinstance(prov.get("served"), dict) else {}
    picks = {"nel.weights_sha256": ((served.get("model") or {}).get("weights_sha256")),
             "nel.reported_model": ((served.get("model") or {}).get("reported_id")),
             "nel.chat_template_sha256": ((served.get("chat_template") or {}).get("sha256")),
             "nel.server": " ".join(str(v) for v in (served.get("server") or {}).values()) or None,
             "nel.dataset_sha256": ((prov.get("dataset") or {}).get("sha256")),
             "nel.prompt_sha256": ((prov.get("prompt") or {}).get("template_sha256")),
             "nel.prompt_set": ((prov.get("prompt") or {}).get("prompt_set"))}
    return {k: str(v) for k, v in picks.items() if v not in (None, "", "unknown")}


def _step(doc: dict[str, Any], model: str, model_id: Any) -> int:
    """The checkpoint's training step: the run's `checkpoints.step_pattern` when it set one (as
    the `checkpoint_trends` table reads it), else the built-in markers; 0 when neither matches."""
    nel_config = doc.get("nel_config") if isinstance(doc.get("nel_config"), dict) else {}
    pattern = (nel_config.get("checkpoints") or {}).get("step_pattern")
    for name in (model, str(model_id or "")):
        if pattern:
            found = checkpoint_family_step(name, str(pattern))
            step = None if found is None else found[1]
        else:
            step = checkpoint_step(name)
        if step is not None:
            return step
    return 0


def read_bundle(path: Path) -> dict[str, Any]:
    """The `eval-*.json` document at `path`.

    Raises:
        NelError: the file cannot be read or is not a bundle (one line).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NelError(f"{path}: cannot read the bundle ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict):
        raise NelError(f"{path}: not a bundle (a JSON object was expected)")
    bench = doc.get("benchmark")
    if not isinstance(doc.get("bundle"), dict) and not (isinstance(bench, dict) and bench.get("name")):
        raise NelError(f"{path}: not a bundle (no `bundle` or `benchmark.name`: write it with `nel eval run`)")
    return doc


def _params(doc: dict[str, Any], config: dict[str, Any], bench: str, model: str, model_id: Any,
            settings: ContentSettings) -> dict[str, str]:
    gen = doc.get("generator") if isinstance(doc.get("generator"), dict) else {}
    raw: dict[str, Any] = {"benchmark": bench, "model": model_id or model, "nel.model": model,
                           "nel_version": gen.get("version"), "config_hash": doc.get("config_hash"),
                           "sdk_version": doc.get("sdk_version")}
    raw.update({k: config.get(k) for k in _RUN_PARAMS})
    raw.update(settings.extra_metadata or {})
    if settings.log_config_params:
        raw.update(_flatten(config, "config", settings.log_config_params_max_depth))
    return {metric_key(k): _param_value(v) for k, v in raw.items() if v not in (None, "")}


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text.replace("\r", " ").replace("\n", " ")[:_PARAM_MAX]


def _flatten(value: Any, prefix: str, depth: int) -> dict[str, Any]:
    """`config.a.b` keys of a nested config, `depth` levels deep (0.3.0's `flatten_config`)."""
    if depth <= 0 or not isinstance(value, dict | list):
        return {prefix: "null" if value is None else value}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(_flatten(v, f"{prefix}.{k}", depth - 1))
    return out


def _metrics(doc: dict[str, Any], bundle: dict[str, Any]) -> dict[str, float]:
    """Every score of the bundle, each with its CI bounds and standard error."""
    out: dict[str, float] = {}
    score = bundle.get("score") if isinstance(bundle.get("score"), dict) else {}
    _score_metrics(out, "score", score)
    for name in ("n_items", "n_samples", "n_failed_samples", "n_repeats"):
        _put(out, name, score.get(name))
    for kind in ("pass_at_k", "maj_at_k"):
        for k, entry in (score.get(kind) or {}).items():
            _score_metrics(out, f"{kind.removesuffix('_k')}_{k}", entry)
    for cat, entry in (bundle.get("per_category") or {}).items():
        _score_metrics(out, f"category/{cat}", entry)
    # 0.3.0's scores (a harness's own, for one), under 0.3.0's names when nel has no such score
    for name, entry in ((doc.get("benchmark") or {}).get("scores") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("value"), int | float) and metric_key(name) not in out:
            _score_metrics(out, name, {"mean": entry["value"], "se": entry.get("stderr"),
                                       "ci_low": entry.get("ci_lower"), "ci_high": entry.get("ci_upper")})
    runtime = bundle.get("runtime") if isinstance(bundle.get("runtime"), dict) else {}
    tokens = runtime.get("tokens") if isinstance(runtime.get("tokens"), dict) else {}
    _put(out, "runtime/n_errors", runtime.get("n_errors"))
    _put(out, "runtime/prompt_tokens", tokens.get("prompt_total"))
    _put(out, "runtime/completion_tokens", tokens.get("completion_total"))
    _put(out, "runtime/samples_per_s", runtime.get("samples_per_s"))
    cost = bundle.get("cost") if isinstance(bundle.get("cost"), dict) else {}
    for name, key in (("total_usd", "total_cost"), ("prompt_usd", "prompt_cost"),
                      ("completion_usd", "completion_cost"), ("per_correct_usd", "per_correct")):
        _put(out, f"cost/{name}", cost.get(key))
    return out


def _score_metrics(out: dict[str, float], name: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        return
    _put(out, name, entry.get("mean"))
    _put(out, f"{name}_ci_low", entry.get("ci_low"))
    _put(out, f"{name}_ci_high", entry.get("ci_high"))
    _put(out, f"{name}_stderr", entry.get("se"))


def _put(out: dict[str, float], name: str, value: Any) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:  # not NaN
        out[metric_key(name)] = float(value)


def _artifacts(bundle_path: Path, model: str, settings: ContentSettings) -> list[tuple[Path, str]]:
    """The files to log, each with its name in the run: the bundle (as `eval.json`) and its
    results (0.3.0's required set), nel's report of (benchmark, model), with
    `only_required: false` 0.3.0's other files, with `copy_logs` the run's logs.

    The bundle is not logged under its own `eval-*.json` name: a local store lives in the
    output directory, and nel's and 0.3.0's tools find bundles by searching a directory tree
    for that name, so a copy there would be counted as a second bundle.
    """
    names = _REQUIRED if settings.only_required else (*_REQUIRED, *_OPTIONAL)
    found = [(bundle_path, BUNDLE_ARTIFACT)] + [(bundle_path.parent / n, n) for n in names
                                                 if (bundle_path.parent / n).is_file()]
    # nel's report of (benchmark, model), written before the bundle. Not nel's own
    # `bundle/model=<m>/bundle.json`: it is written after the exporters run (a stale one
    # from the last build at that time), and the bundle document holds it whole (`bundle`).
    report = _report_dir(bundle_path, model)
    if report is not None:
        found += [(p, f"report/{p.name}") for p in sorted(report.glob("report.*")) if p.is_file()]
    if settings.copy_logs:
        logs = run_root(bundle_path) / "logs"
        found += [(p, f"logs/{p.name}") for p in sorted(logs.iterdir()) if p.is_file()] if logs.is_dir() else []
    patterns = (*_EXCLUDED, *settings.exclude_patterns)
    return [(p, d) for p, d in found
            if not any(fnmatch.fnmatchcase(p.name.lower(), pat.lower()) for pat in patterns)]


def _report_dir(bundle_path: Path, model: str) -> Path | None:
    """nel's report folder of (benchmark, model): `<out>/<bench>/report/model=<m>/` beside a
    one-model benchmark's bundle, or up from `<out>/<bench>/models/<m>/<bench>/`."""
    for up in bundle_path.parents[:4]:
        if (up / "report" / f"model={model}").is_dir():
            return up / "report" / f"model={model}"
    return None


def run_root(bundle_path: Path) -> Path:
    """The output directory of the run that wrote `bundle_path` (the default store goes there):
    the first folder up holding nel's run files, else the bundle's parent's parent (0.3.0's
    `<out>/<bench>/eval-*.json`)."""
    for up in bundle_path.parents[:5]:
        if (up / "nel-config.yaml").is_file() or (up / "nel_run.json").is_file():
            return up
    return bundle_path.parent.parent
