"""The bundle's provenance block from its shards' records, and what compare/gate say when
a baseline and a candidate were evaluated differently."""

from __future__ import annotations

from typing import Any

from nel_assets.engine.results.provenance import (
    bundle_provenance,
    differences_line,
    provenance_differences,
)


def _served(template: str) -> dict[str, Any]:
    return {"model": {"reported_id": "m", "weights_sha256": "sha256:aa"},
            "chat_template": {"sha256": template, "source": "server /props"},
            "tokenizer": "unknown", "server": {"name": "llama.cpp", "version": "b1"}}


def _records(template: str = "sha256:t1", prompt_set: str | None = None,
             digests: tuple[str, ...] = ("d0", "d1")) -> dict[int, dict[str, Any]]:
    return {i: {"written_at": float(i), "seeds_digest": d, "provenance": _served(template),
                "prompt": {"template_sha256": "sha256:p", "system_prompt_sha256": None,
                           "prompt_set": prompt_set}} for i, d in enumerate(digests)}


def test_bundle_provenance_joins_the_shards() -> None:
    p = bundle_provenance(None, _records())
    assert p["served"] == _served("sha256:t1") and "mixed" not in p
    assert p["dataset"]["n_shards"] == 2 and p["dataset"]["sha256"].startswith("sha256:")
    assert p["dataset"]["sha256"] != bundle_provenance(None, _records(digests=("d0", "dX")))["dataset"]["sha256"]
    assert p["prompt"]["template_sha256"] == "sha256:p" and p["nel_version"]
    # shards answered by different templates: the bundle says which fields differ
    recs = _records()
    recs[0]["provenance"] = _served("sha256:OTHER")
    assert bundle_provenance(None, recs)["mixed"] == ["chat_template"]
    # shards written before provenance existed: unknown, not invented
    old = bundle_provenance(None, {0: {"written_at": 1.0}})
    assert old["served"] is None and old["dataset"]["sha256"] == "unknown"


def test_differences_name_template_prompt_set_and_dataset() -> None:
    base = {"provenance": bundle_provenance(None, _records())}
    same = {"provenance": bundle_provenance(None, _records())}
    assert provenance_differences(base, same) == []
    assert differences_line("gsm8k", []) is None
    cand = {"provenance": bundle_provenance(None, _records("sha256:t2", "cot-v2", ("d0", "dX")))}
    diffs = provenance_differences(base, cand)
    assert [d["field"] for d in diffs] == ["chat template", "prompt set", "dataset"]
    assert diffs[0] == {"field": "chat template", "baseline": "sha256:t1", "candidate": "sha256:t2"}
    assert differences_line("gsm8k", diffs) == (
        "warning: gsm8k: baseline and candidate differ in chat template, prompt set, dataset; "
        "the verdict compares different evaluations, not only different models")
    # unknown on either side, or a foreign bundle without provenance: nothing claimed
    hidden = {"provenance": bundle_provenance(None, _records("not exposed"))}
    assert [d["field"] for d in provenance_differences(hidden, cand)] == ["prompt set", "dataset"]
    assert provenance_differences({"provenance": bundle_provenance(None, {})}, {"provenance": {}}) == []
    assert provenance_differences(None, cand) == []
