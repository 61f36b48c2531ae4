"""The bundle's `provenance` block: what exactly was evaluated, so two results can be told
apart (or shown to be the same evaluation) long after the run.

Each shard records what answered it (`served_provenance`, asked once per service per run)
and what it asked (the seed digest of its rows, the prompt's identity); the bundle joins
them with the nel version and the generation settings. `provenance_differences` is what
`nel compare` and `nel gate` say when a baseline and a candidate were not evaluated alike.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks import EvalEnvironment
    from nel_resources.config import ServiceConfig
    from nel_resources.model_client import ModelClient
    from nel_resources.specs import RunSpec

UNKNOWN = "unknown"


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


async def served_provenance(svc: ServiceConfig, base_url: str | None, client: ModelClient,
                            model_id: str | None) -> dict[str, Any]:
    """What answered: weights or reported model id, chat template, tokenizer, server. A
    failure to ask leaves every field unknown (with the reason); it never fails the shard."""
    from nel_resources.services.provenance import service_provenance

    try:
        return await service_provenance(svc, base_url or client.base_url, client.base_headers, model_id,
                                        getattr(client, "models_reply", None))
    except Exception as exc:  # provenance is a record, not a precondition of the run
        return {"model": {"reported_id": UNKNOWN, "weights_sha256": UNKNOWN},
                "chat_template": {"sha256": UNKNOWN, "source": UNKNOWN}, "tokenizer": UNKNOWN,
                "server": {"name": UNKNOWN, "version": UNKNOWN},
                "error": f"{type(exc).__name__}: {exc}"[:300]}


def prompt_identity(env: EvalEnvironment, run: RunSpec) -> dict[str, Any]:
    """What identifies the prompt today: the benchmark's prompt settings as its fingerprint
    states them (class, version, protocol, few-shot count, a BYOB file's digest) and the
    system prompt. `prompt_set` is the named prompt set, when the benchmark has one."""
    return {"template_sha256": _sha(env.fingerprint()),
            "system_prompt_sha256": _sha(run.system_prompt) if run.system_prompt else None,
            "prompt_set": getattr(env, "prompt_set", None)}


def nel_version() -> str:
    """The installed nel's version."""
    from nel_assets.engine.nemo.nemo_format import _nel_version

    return _nel_version()


def bundle_provenance(run: RunSpec | None, records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The bundle's `provenance` from its shards' records (and the run's settings).

    The served model's block is the latest shard's; when shards were answered by different
    weights, templates or servers, `mixed` names the fields that differ.
    """
    ordered = [records[s] for s in sorted(records)]
    served = [r["provenance"] for r in sorted(ordered, key=lambda r: r.get("written_at") or 0)
              if isinstance(r.get("provenance"), dict)]
    digests = [r.get("seeds_digest") for r in ordered]
    prompts = [r["prompt"] for r in ordered if isinstance(r.get("prompt"), dict)]
    out: dict[str, Any] = {
        "nel_version": nel_version(),
        "served": served[-1] if served else None,
        "dataset": {"sha256": _sha("|".join(str(d) for d in digests))
                    if digests and all(digests) else UNKNOWN, "n_shards": len(ordered)},
        "prompt": prompts[-1] if prompts else {"template_sha256": UNKNOWN, "prompt_set": None},
    }
    mixed = sorted({k for p in served for k in p if p.get(k) != served[-1].get(k)}) if served else []
    if mixed:
        out["mixed"] = mixed
    if run is not None:
        svc = run.service.config
        out["generation"] = {**svc.generation.model_dump(exclude_none=True), "protocol": svc.protocol,
                             "repeats": run.repeats}
        out["service"] = {"name": run.service.name, "type": svc.type, "model": run.model_id}
    return out


# (label, path into the provenance block) compared between a baseline and a candidate.
_COMPARED = (
    ("chat template", ("served", "chat_template", "sha256")),
    ("prompt set", ("prompt", "prompt_set")),
    ("prompt template", ("prompt", "template_sha256")),
    ("system prompt", ("prompt", "system_prompt_sha256")),
    ("dataset", ("dataset", "sha256")),
)


_MISSING = object()


def _at(block: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(block, dict) or k not in block:
            return _MISSING  # not recorded (an older bundle): unknown, unlike a recorded None
        block = block[k]
    return block


def provenance_differences(baseline: dict[str, Any] | None, candidate: dict[str, Any] | None
                           ) -> list[dict[str, Any]]:
    """Where a baseline's and a candidate's bundles were evaluated differently (chat
    template, prompt set or template, system prompt, dataset): one entry per field whose
    values are both known and differ (a field unknown on either side proves nothing)."""
    out: list[dict[str, Any]] = []
    bp = (baseline or {}).get("provenance")
    cp = (candidate or {}).get("provenance")
    if not isinstance(bp, dict) or not isinstance(cp, dict):
        return out
    for label, path in _COMPARED:
        b, c = _at(bp, path), _at(cp, path)
        if any(v is _MISSING or v in (UNKNOWN, "not exposed") for v in (b, c)):
            continue
        if b != c:
            out.append({"field": label, "baseline": b, "candidate": c})
    return out


def differences_line(bench: str, diffs: list[dict[str, Any]]) -> str | None:
    """The one line `nel compare` / `nel gate` print for a benchmark's differences."""
    if not diffs:
        return None
    what = ", ".join(d["field"] for d in diffs)
    return (f"warning: {bench}: baseline and candidate differ in {what}; the verdict compares "
            "different evaluations, not only different models")


def with_provenance_differences(doc: dict[str, Any], base: Any, cand: Any) -> dict[str, Any]:
    """A comparison document (`runs.compare_runs`) with each benchmark's
    `provenance_differences` and the top-level `provenance_warnings` (the lines `nel compare`
    and `nel gate` print); `base` and `cand` are the compared `runs.Run`s."""
    lines: list[str] = []
    for name, comp in doc.get("benchmarks", {}).items():
        diffs = provenance_differences(base.benchmarks[name].bundle, cand.benchmarks[name].bundle)
        comp["provenance_differences"] = diffs
        line = differences_line(name, diffs)
        if line:
            lines.append(line)
    doc["provenance_warnings"] = lines
    return doc
