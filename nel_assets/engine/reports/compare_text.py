"""Human-readable text of a ``regression.json`` comparison (what ``nel compare`` prints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_compact", "format_comparison", "format_flips", "mde_text", "pts", "test_text"]

_VERDICT_TEXT = {
    "regression": "REGRESSION",
    "improvement": "IMPROVEMENT",
    "within_max_drop": "OK (within max drop)",
    "not_detectable": "NOT DETECTABLE",
    "inconclusive": "NOT SETTLED BY THE CI",
}


def pts(x: float | None, signed: bool = True, digits: int = 2) -> str:
    """A score-unit number as percentage points (``-0.0303`` -> ``-3.03``)."""
    if x is None:
        return "n/a"
    return f"{100 * x:+.{digits}f}" if signed else f"{100 * x:.{digits}f}"


def mde_text(c: Mapping[str, Any]) -> str:
    """The MDE in points, or why it is undefined (never a misleading ``0.00``)."""
    if c.get("mde") is None:
        return c.get("mde_note") or "undefined"
    return f"{pts(c['mde'], False)} pts"


def _se_text(c: Mapping[str, Any]) -> str:
    if c.get("se") is None:
        return c.get("se_note") or "undefined"
    return f"{pts(c['se'], False)} pts"


def _p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def _runtime_line(rt: Mapping[str, Any]) -> str | None:
    parts = []
    lat = rt.get("model_ms")
    if lat and lat["base"]["mean"] is not None and lat["cand"]["mean"] is not None:
        rel = lat.get("rel_delta_mean")
        parts.append(f"latency mean {lat['base']['mean']:.1f} → {lat['cand']['mean']:.1f} ms"
                     + (f" ({100 * rel:+.1f}%)" if rel is not None else ""))
        if lat["base"]["p95"] is not None and lat["cand"]["p95"] is not None:
            parts.append(f"p95 {lat['base']['p95']:.1f} → {lat['cand']['p95']:.1f} ms")
    tps = rt.get("tokens_per_s")
    if tps and tps.get("base") is not None and tps.get("cand") is not None:
        rel = tps.get("rel_delta")
        parts.append(f"tokens/s {tps['base']:.0f} → {tps['cand']:.0f}"
                     + (f" ({100 * rel:+.1f}%)" if rel is not None else ""))
    return "; ".join(parts) if parts else None


def test_text(c: Mapping[str, Any]) -> str:
    """The paired test and its p-value in words."""
    if c["test"] == "mcnemar_exact":
        m = c["mcnemar"]
        return (f"McNemar exact p={_p(c['p_value'])} (baseline-only correct "
                f"{m['base_only_correct']}, candidate-only correct {m['cand_only_correct']})")
    if c["test"] == "sign_exact":
        return f"sign test (exact binomial) p={_p(c['p_value'])}"
    if c["test"] == "none":
        return "no test (no paired items)"
    return f"{c['test']} permutation p={_p(c['p_value'])} ({c['n_permutations']} permutations, seed {c['seed']})"


def _bench_lines(name: str, c: Mapping[str, Any], verbose: bool) -> list[str]:
    lines = [f"{name}: {c['n_paired']} paired items ({c['n_unpaired_base']} only in baseline, "
             f"{c['n_unpaired_cand']} only in candidate)"]
    if not c["n_paired"]:
        lines.append("  no shared items: nothing to compare")
        return lines
    level = round(100 * c["level"])
    lines.append(f"  score      baseline {pts(c['base_mean'], False)}%  candidate "
                 f"{pts(c['cand_mean'], False)}%  Δ {pts(c['delta'])} pts  {level}% CI "
                 f"[{pts(c['ci_low'])}, {pts(c['ci_high'])}] ({c.get('ci_method') or 'n/a'})  "
                 f"paired SE {_se_text(c)} ({c['se_method']})")
    test = test_text(c)
    corr = "n/a" if c["correlation"] is None else f"{c['correlation']:.3f}"
    lines.append(f"  test       {test}; item correlation {corr}")
    lines.append(f"  power      MDE at {int(100 * c['power'])}% power, α={c['alpha']:g}: "
                 f"{mde_text(c)} for n={c['n_paired']}")
    fl = c["flips"]
    ex_w = ", ".join(str(x) for x in fl["better_to_worse"]["examples"]) or "-"
    ex_b = ", ".join(str(x) for x in fl["worse_to_better"]["examples"]) or "-"
    lines.append(f"  flips      better→worse {fl['better_to_worse']['count']} (e.g. {ex_w}); "
                 f"worse→better {fl['worse_to_better']['count']} (e.g. {ex_b})")
    v = c["verdict"]
    why = ""
    if v == "regression":
        margin = c.get("max_drop")
        why = ((f": the CI lies entirely below −{pts(margin, False)} pts" if margin else
                ": the CI lies entirely below 0")
               + (f" (significant, p={_p(c['p_value'])})" if c["significant"] else ""))
    elif v == "improvement":
        why = ": the CI lies above 0"
    elif v == "not_detectable":
        need = c.get("items_to_detect_delta")
        why = (f": |Δ| {pts(abs(c['delta']), False)} pts is below the MDE {pts(c['mde'], False)} pts; "
               "this run cannot tell a change this small from noise"
               + (f" (~{need} paired items would detect it at 80% power)" if need else ""))
    elif v == "within_max_drop":
        why = f": the CI stays above −{pts(c['max_drop'], False)} pts"
    elif c.get("ci_high") is not None and c["ci_high"] < 0:
        # below 0 but not below −max_drop: say so, never "covers 0" (it does not)
        why = (f": the CI lies entirely below 0 (a drop is established) but reaches above "
               f"−{pts(c.get('max_drop') or 0, False)} pts, so a drop beyond the max drop is "
               "neither established nor ruled out")
    elif c.get("mde") is None:
        why = f": the CI covers 0; the MDE is {c.get('mde_note') or 'undefined'}"
    else:
        why = ": the CI covers 0 and |Δ| ≥ MDE; more items would settle it"
    lines.append(f"  interval   {_VERDICT_TEXT.get(v, v)}{why}")
    if c.get("outcome"):  # NeMo Evaluator's verdict by its rules, which sets the exit status
        lines.append(f"  verdict    {c['outcome']} (NeMo Evaluator 0.3.0's rules): {c.get('outcome_reason') or ''}")
    rt = _runtime_line(c.get("runtime") or {})
    if rt:
        lines.append(f"  runtime    {rt}")
    cats = c.get("per_category") or {}
    if cats:
        shown = sorted(cats.items(), key=lambda kv: kv[1]["delta"] if kv[1]["delta"] is not None else 0)
        if not verbose:
            shown = shown[:5]
        lines.append(f"  categories ({len(cats)}; {'all' if verbose else 'largest drops first'}):")
        for cat, v2 in shown:
            lines.append(f"    {cat:<24} Δ {pts(v2['delta'])} pts  CI [{pts(v2['ci_low'])}, "
                         f"{pts(v2['ci_high'])}]  n={v2['n_items']}")
    if verbose:
        for direction, exs in (c.get("flip_examples") or {}).items():
            for ex in exs[:3]:
                b, cd = ex["baseline"], ex["candidate"]
                lines.append(f"    {direction} item {ex['item']}: expected {ex.get('expected')!r}; "
                             f"baseline {b.get('extracted')!r} ({b.get('reward')}) → candidate "
                             f"{cd.get('extracted')!r} ({cd.get('reward')})")
    return lines


def format_comparison(doc: Mapping[str, Any], *, verbose: bool = False) -> str:
    """The text report of a ``compare_runs`` document.

    Args:
        doc: The regression document.
        verbose: All categories and flip example texts.

    Returns:
        Multi-line text ending in an overall line.
    """
    b, c = doc["baseline"], doc["candidate"]
    md = doc.get("max_drop")
    lines = [f"nel compare  baseline {b['model']} ({b['source']})",
             f"             candidate {c['model']} ({c['source']})",
             (f"max drop {pts(md, False)} pts (score units {md:g})" if md is not None
              else "max drop: none (a regression is a CI entirely below 0)") + f"; α={doc['alpha']:g}", ""]
    for name, comp in doc["benchmarks"].items():
        lines += _bench_lines(name, comp, verbose)
        lines.append("")
    for side, names in doc["missing"].items():
        if names:
            lines.append(f"missing in {side}: {', '.join(names)} (not compared)")
    regs = doc["regressions"]
    if regs:
        lines.append(f"overall: REGRESSION in {', '.join(regs)}")
    else:
        lines.append(f"overall: no regression detected in {len(doc['benchmarks'])} benchmark(s)")
    if doc.get("outcome"):
        lines.append(f"verdict: {doc['outcome']}")
    return "\n".join(lines)


def format_compact(doc: Mapping[str, Any]) -> str:
    """A few lines for chat or CI logs: the verdict, then one line per benchmark."""
    b, c = doc["baseline"], doc["candidate"]
    lines = [f"{doc.get('outcome', '?')}: {c['model']} vs {b['model']} "
             f"({len(doc['benchmarks'])} benchmark(s))"]
    for name, comp in doc["benchmarks"].items():
        fl = comp["flips"]
        lines.append(f"  {name}: {comp.get('outcome', '?')}  {pts(comp['base_mean'], False)}% → "
                     f"{pts(comp['cand_mean'], False)}%  Δ {pts(comp['delta'])} pts  "
                     f"CI [{pts(comp['ci_low'])}, {pts(comp['ci_high'])}]  p={_p(comp['p_value'])}  "
                     f"flips −{fl['better_to_worse']['count']} +{fl['worse_to_better']['count']}")
    for side, names in doc["missing"].items():
        if names:
            lines.append(f"  missing in {side}: {', '.join(names)}")
    return "\n".join(lines)


def format_flips(doc: Mapping[str, Any]) -> str:
    """Every flipped item with its example texts, per benchmark (``--show-flips``).

    The regression document keeps up to ``n_examples`` items per direction; the count says
    how many flipped in all.
    """
    lines = ["flips (baseline → candidate):"]
    for name, comp in doc["benchmarks"].items():
        for direction, label in (("better_to_worse", "regressions"), ("worse_to_better", "improvements")):
            total = comp["flips"][direction]["count"]
            exs = (comp.get("flip_examples") or {}).get(direction) or []
            lines.append(f"  {name} {label}: {total}" + (f" (showing {len(exs)})" if len(exs) < total else ""))
            for ex in exs:
                bb, cc = ex["baseline"], ex["candidate"]
                lines.append(f"    item {ex['item']}: expected {ex.get('expected')!r}; baseline "
                             f"{bb.get('extracted')!r} ({bb.get('reward')}) → candidate "
                             f"{cc.get('extracted')!r} ({cc.get('reward')})")
    return "\n".join(lines)
