"""The cost and provenance lines of the markdown and HTML reports (plain text; each
renderer escapes it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def usd(x: float | None) -> str:
    """Dollars with enough digits for the fractions of a cent small runs cost."""
    if x is None:
        return "n/a"
    if x >= 1:
        return f"${x:,.2f}"
    return f"${x:.6f}".rstrip("0").rstrip(".") if x else "$0"


def cost_line(bundle: Mapping[str, Any]) -> str | None:
    """`Cost: $… (… prompt tokens at $…/M, … completion tokens at $…/M); $… per correct
    answer` for a priced bundle; None without pricing."""
    c = bundle.get("cost")
    if not isinstance(c, Mapping):
        return None
    per = (f"{usd(c.get('per_correct'))} per correct answer" if c.get("per_correct") is not None
           else "no correct answer, so no cost per correct answer")
    unpriced = f"; {c['n_unpriced']} samples without reported usage are not counted" if c.get("n_unpriced") else ""
    return (f"Cost: {usd(c.get('total_cost'))} ({c.get('prompt_tokens', 0):.0f} prompt tokens at "
            f"${c.get('input_per_million', 0):g}/M, {c.get('completion_tokens', 0):.0f} completion tokens at "
            f"${c.get('output_per_million', 0):g}/M); {per}{unpriced}")


def run_cost_line(bundles: Sequence[Mapping[str, Any]]) -> str | None:
    """The whole report's cost (every priced bundle), or None when none is priced."""
    priced = [b["cost"] for b in bundles if isinstance(b.get("cost"), Mapping)]
    if not priced:
        return None
    total = sum(float(c.get("total_cost") or 0.0) for c in priced)
    correct = sum(float(c.get("correct") or 0.0) for c in priced)
    per = f"; {usd(total / correct)} per correct answer" if correct > 0 else ""
    return f"Total cost: {usd(total)} over {len(priced)} priced result{'s' if len(priced) != 1 else ''}{per}"


def provenance_line(bundle: Mapping[str, Any]) -> str | None:
    """What was evaluated, in one line: weights or reported model, chat template, server,
    dataset and prompt hashes, nel version."""
    p = bundle.get("provenance")
    if not isinstance(p, Mapping):
        return None
    served = p.get("served") or {}
    model = served.get("model") or {}
    tmpl = served.get("chat_template") or {}
    server = served.get("server") or {}
    weights = model.get("weights_sha256")
    what = (f"weights {_short(weights)}" if weights and weights != "unknown"
            else f"reported model {model.get('reported_id', 'unknown')} (revision {model.get('revision', 'unknown')})")
    parts = [what, f"chat template {_short(tmpl.get('sha256'))} ({tmpl.get('source', 'unknown')})",
             f"server {server.get('name', 'unknown')} {server.get('version', 'unknown')}",
             f"dataset {_short((p.get('dataset') or {}).get('sha256'))}",
             f"prompt {_short((p.get('prompt') or {}).get('template_sha256'))}",
             f"nel {p.get('nel_version', 'unknown')}"]
    if p.get("mixed"):
        parts.append(f"shards differ in {', '.join(p['mixed'])}")
    return "Provenance: " + "; ".join(parts)


def _short(digest: Any) -> str:
    """`sha256:1234abcd…` (12 hex digits: enough to tell two apart in a report)."""
    if not isinstance(digest, str):
        return "unknown"
    return digest[:19] + "…" if digest.startswith("sha256:") else digest
