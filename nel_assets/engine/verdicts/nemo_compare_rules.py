"""`nel compare`'s verdict by NeMo Evaluator 0.3.0's rules: PASS, WARN, BLOCK, INCONCLUSIVE.

CI scripts written for NeMo Evaluator branch on its verdicts and exit statuses, so nel reaches
the same verdict from the same per-item rewards, by the same rules (its
``engine.comparison._compute_verdict``). nel's own statistics (paired Newcombe CI, two-sided
exact McNemar or permutation test, MDE from the paired SE) stay in the output next to the
verdict; they do not set it. The rules, on the items both runs have (repeats averaged per
problem first):

* **Test** (``--test auto``): every paired per-problem reward 0 or 1: one-sided exact McNemar
  (binomial on the discordant pairs, H1: more regressions than improvements); otherwise a
  one-sided sign-flip permutation test on ``base − cand`` (10,000 flips, numpy seed 42).
  ``sign`` (one-sided exact sign test) and ``mcnemar`` can be forced. An item is *correct*
  when its reward is above ``correct_above`` (default 0); regressions and improvements are
  items that crossed it.
* **Effect**: McNemar and sign ``(regressions − improvements) / n_paired``; permutation the
  paired Cohen's d ``mean(base − cand) / sd``.
* **PASS** when no item crossed (no discordant pairs).
* **BLOCK** when significant (p < α), ``|effect| > min_effect`` and regressions outnumber
  improvements; else **WARN** when significant.
* **INCONCLUSIVE** when not significant and underpowered: ``2.8 / sqrt(discordant) >
  2 · min_effect`` (its MDE of a one-sided binomial at 80% power); else **PASS**.

``min_effect`` is ``-t/--max-drop`` (CLI default 0.05; 0.005 through the Python API, as
``compare_runs`` there). This module is pure numpy/scipy: the CLI and the engine call it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = ["API_MIN_EFFECT", "compare_verdict", "paired_values"]

API_MIN_EFFECT = 0.005  # NeMo Evaluator's compare_runs(min_effect=...) default
_POWER_80_FACTOR = 2.8  # its z_alpha + z_beta (one-sided α=0.05, 80% power)
_N_PERMUTATIONS = 10_000
_PERMUTATION_SEED = 42


def paired_values(base: Mapping[str, Any], cand: Mapping[str, Any],
                  field: str = "scores") -> tuple[list[str], np.ndarray, np.ndarray]:
    """The items both sides have (as strings, sorted) and each side's ``field`` on them.

    Args:
        base: Baseline ``stats.item_table``.
        cand: Candidate ``stats.item_table``.
        field: ``scores`` (per-problem mean reward) or ``pass_frac``.
    """
    def table(side: Mapping[str, Any]) -> dict[str, float]:
        vals = side.get(field)
        if vals is None:  # an older item table: only mean rewards
            vals = side["scores"]
        return {str(k): float(v) for k, v in zip(side["items"], vals, strict=True) if math.isfinite(float(v))}

    b, c = table(base), table(cand)
    keys = sorted(set(b) & set(c))
    return keys, np.array([b[k] for k in keys], dtype=np.float64), np.array([c[k] for k in keys], dtype=np.float64)


def _binomial_greater(k: int, n: int) -> float:
    return round(float(_st.binomtest(k, n, 0.5, alternative="greater").pvalue), 6)


def _permutation(d: np.ndarray, alpha: float) -> tuple[float, bool, float | None]:
    """One-sided sign-flip test of mean(base − cand) > 0, exactly as NeMo Evaluator draws it."""
    n = d.shape[0]
    if n == 0:
        return 1.0, False, None
    observed = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    effect = round(observed / sd, 6) if sd > 0 else None
    rng = np.random.default_rng(_PERMUTATION_SEED)
    signs = rng.choice([-1, 1], size=(_N_PERMUTATIONS, n))
    perm = (signs * d).mean(axis=1)
    p = float((perm >= observed).sum() + 1) / (_N_PERMUTATIONS + 1)
    return round(p, 6), p < alpha, effect


def compare_verdict(base: Mapping[str, Any], cand: Mapping[str, Any], *,
                    min_effect: float = API_MIN_EFFECT, test: str = "auto",
                    correct_above: float | None = None, alpha: float = 0.05) -> dict[str, Any]:
    """NeMo Evaluator 0.3.0's compare verdict for two item tables.

    Args:
        base: Baseline ``stats.item_table``.
        cand: Candidate ``stats.item_table``.
        min_effect: Practical threshold (``-t/--max-drop``), score units.
        test: ``auto``, ``mcnemar``, ``sign`` or ``permutation``.
        correct_above: Reward above which an item is correct (None: 0).
        alpha: Significance level.

    Returns:
        ``{verdict, verdict_reasons, test_used, p_value, significant, effect_size,
        n_discordant, n_regressions, n_improvements, mde_discordant, min_effect}``.
    """
    keys, xb, xc = paired_values(base, cand)
    n = len(keys)
    thr = 0.0 if correct_above is None else float(correct_above)
    b_ok, c_ok = xb > thr, xc > thr
    n_reg = int(np.count_nonzero(b_ok & ~c_ok))
    n_imp = int(np.count_nonzero(~b_ok & c_ok))
    binary = bool(np.all(np.isin(xb, (0.0, 1.0))) and np.all(np.isin(xc, (0.0, 1.0))))
    used = test if test != "auto" else ("mcnemar" if binary else "permutation")
    d = xb - xc  # positive = the baseline did better (NeMo Evaluator's sign)
    if used == "mcnemar":
        n_disc = n_reg + n_imp
        effect = round((n_reg - n_imp) / n, 6) if n else None
        p = 1.0 if n_disc == 0 else _binomial_greater(n_reg, n_disc)
        significant = p < alpha
    elif used == "sign":
        pos, neg = int(np.count_nonzero(d > 0)), int(np.count_nonzero(d < 0))
        n_disc = pos + neg
        p = 1.0 if n_disc == 0 else _binomial_greater(pos, n_disc)
        significant = p < alpha
        effect = (n_reg - n_imp) / n if n else None
    else:
        p, significant, effect = _permutation(d, alpha)
        n_disc = n_reg + n_imp
    out: dict[str, Any] = {"test_used": used, "p_value": p, "significant": bool(significant),
                           "effect_size": effect, "n_discordant": n_disc, "n_regressions": n_reg,
                           "n_improvements": n_imp, "n_paired": n, "mde_discordant": None,
                           "min_effect": float(min_effect)}
    if n_disc == 0:
        return {**out, "verdict": "PASS", "verdict_reasons": [
            "no discordant pairs; baseline and candidate produced identical per-sample results"]}
    mde = _POWER_80_FACTOR / math.sqrt(max(1, n_disc))
    out["mde_discordant"] = mde
    if significant and effect is not None and abs(effect) > min_effect and n_reg > n_imp:
        return {**out, "verdict": "BLOCK",
                "verdict_reasons": [f"{used} p={p:.4f}, effect={effect:.4f} > {min_effect}"]}
    if significant:
        return {**out, "verdict": "WARN", "verdict_reasons": [
            f"{used} p={p:.4f} (significant) but effect below practical threshold"]}
    if mde > min_effect * 2 and n > 0:
        need = max(1, int((_POWER_80_FACTOR / min_effect) ** 2)) if min_effect > 0 else None
        return {**out, "verdict": "INCONCLUSIVE", "verdict_reasons": [
            f"Test underpowered: {n_disc} discordant pairs can detect ~{mde * 100:.1f}% regression "
            f"at 80% power, but practical threshold is {min_effect * 100:.1f}%."
            + (f" Need ~{need} discordant pairs to detect {min_effect * 100:.1f}%." if need else "")
            + " Increase sample size, add repeats, or use a higher-N proxy benchmark."]}
    return {**out, "verdict": "PASS", "verdict_reasons": [f"{used} p={p:.4f} (not significant)"]}
