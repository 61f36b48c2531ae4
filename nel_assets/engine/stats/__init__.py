"""Scores with honest error bars: the pure, vectorised statistics behind every bundle.

The bar is Miller, "Adding Error Bars to Evals" (2024):

* The unit of analysis is the *question*. With K repeats, a question's K samples are averaged
  first and the standard error is taken over questions, never over n·K draws as if they were
  independent (that would shrink the SE by up to sqrt(K) for no reason).
* When questions share a cluster (a passage, a translated item, a category) the SE is
  cluster-robust, because correlated questions carry less information than independent ones.
* A failed request (reward NaN/null) is missing data, not a wrong answer: it is left out of
  its question's mean and counted. A question with no valid sample is dropped and counted.

Every public function returns plain Python floats/ints (``None`` instead of NaN) so results
go straight into JSON, Parquet metadata or the Dagster UI. No Dagster import here.

Choices, with reasons:

* **Clustered SE** (``mean_ci``): the sandwich over cluster sums of residuals,
  ``SE² = G/(G−1) · (1/n²) · Σ_c (Σ_{i∈c} (x_i − x̄))²`` (CR1). The small-sample factor
  ``G/(G−1)`` is applied because (a) without it the SE is biased low for a modest number of
  clusters, (b) with it, singleton clusters reproduce the ordinary ``s/sqrt(n)`` exactly, so
  clustering never changes the answer when it should not, and (c) it equals statsmodels'
  OLS cluster-robust SE of an intercept-only model, a widely used reference.
* **Critical value**: the normal quantile when the number of independent units (questions,
  or clusters when clustered) is ≥ 30; Student's t with (units − 1) degrees of freedom
  otherwise, because the SE itself is noisy with few units and the normal interval
  undercovers there.
* **pass@k** uses the unbiased estimator of Chen et al. (2021), computed as a product of
  ratios (no large binomial coefficients, no overflow). It needs binary rewards.
* **Score intervals** (``score_interval``): one method per score, chosen once and labelled in
  ``ci_method``, so every surface (CLI, reports, Dagster metadata, the ``bundles`` view)
  shows the same numbers. Scores in [0, 1] get a Wilson score interval (Wilson 1927), which
  stays inside [0, 1] and never collapses to a point at 0 or 1:

  - ``"wilson"``: every question scored exactly 0 or 1 (one sample each, or repeats that
    all agree) and no clusters. The textbook Wilson interval with n = the number of
    questions: each question is one Bernoulli trial.
  - ``"wilson_effective_n"``: per-question means in [0, 1] (repeats, graded rewards, or
    clustered questions). The Wilson interval at the effective sample size
    ``n_eff = p̂(1 − p̂) / SE²`` with Miller's question-level (or clustered) SE, i.e. the
    number of independent 0/1 trials that would give the same SE (Korn & Graubard 1998).
    With fewer than 30 units ``n_eff`` is scaled by ``(z / t_{df})²`` (their small-sample
    adjustment, the analogue of using t instead of z). For 0/1 rewards it is capped at the
    number of scored samples (a mean of 0/1 draws never carries more information than all
    of them). When the
    SE is not estimable — one question, one cluster, or no variation at all (every
    question scored 0, or every one 1) — ``n_eff`` is the number of questions (clusters):
    each counts as one 0/1 trial. That is conservative because a score in [0, 1] with mean
    p has variance ≤ p(1 − p), the Bernoulli variance.
  - ``"t"`` / ``"normal"``: scores outside [0, 1] (unbounded rewards) keep the mean ± q·SE
    interval of ``mean_ci``.

  ``se`` stays the question-level (or clustered) SE; it is None, with ``se_note`` saying
  why, when it is not estimable (fewer than two units, or no variation in the scores: a
  plug-in SE of 0 would claim certainty the data cannot give).
"""

from nel_assets.engine.stats.at_k import maj_at_k, pass_at_k, pass_at_k_table
from nel_assets.engine.stats.bootstrap import bootstrap_ci
from nel_assets.engine.stats.checkpoint_alarm import AlarmResult, Checkpoint, checkpoint_alarm
from nel_assets.engine.stats.intervals import (
    CI_METHODS,
    mean_ci,
    score_interval,
    wilson_at,
    wilson_ci,
)
from nel_assets.engine.stats.summary import item_table, per_category, repeat_variance, score_summary
from nel_assets.engine.stats.units import NORMAL_MIN_UNITS, critical_value, is_binary, item_means

__all__ = [
    "CI_METHODS",
    "NORMAL_MIN_UNITS",
    "AlarmResult",
    "Checkpoint",
    "bootstrap_ci",
    "checkpoint_alarm",
    "critical_value",
    "is_binary",
    "item_means",
    "item_table",
    "maj_at_k",
    "mean_ci",
    "pass_at_k",
    "pass_at_k_table",
    "per_category",
    "repeat_variance",
    "score_interval",
    "score_summary",
    "wilson_at",
    "wilson_ci",
]
