"""pass@k (the unbiased estimator) and maj@k, per question and as tables with intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nel_assets.engine.stats.intervals import score_interval
from nel_assets.engine.stats.units import (
    _as_float,
    _codes,
    _default_ks,
    _group,
    _is_missing,
    _item_labels,
)


def pass_at_k(n: Any, c: Any, k: Any) -> Any:
    """Unbiased pass@k: ``1 − C(n−c, k) / C(n, k)``, vectorised and overflow-free.

    The ratio is evaluated as ``Π_{j=0}^{k−1} (n−c−j)/(n−j)``: every factor is in [0, 1],
    so there is no overflow and the relative error is about k·eps.

    Args:
        n: Samples per question (broadcastable).
        c: Correct samples per question.
        k: k (1 ≤ k); entries with k > n give NaN (not estimable).

    Returns:
        Float or array of pass@k estimates.
    """
    nb, cb, kb = np.broadcast_arrays(
        np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64), np.asarray(k, dtype=np.int64)
    )
    shape = nb.shape
    nf, cf, kf = nb.reshape(-1), cb.reshape(-1), kb.reshape(-1)
    if np.any(cf < 0) or np.any(cf > nf) or np.any(kf < 1):
        raise ValueError("pass_at_k needs 0 <= c <= n and k >= 1")
    out = np.full(nf.shape[0], np.nan)
    ok = kf <= nf
    if ok.any():
        kmax = int(kf[ok].max())
        idx = np.flatnonzero(ok)
        # chunk rows so the (rows × kmax) factor matrix stays ~4M floats
        step = max(1, 4_000_000 // kmax)
        j = np.arange(kmax, dtype=np.float64)
        for s in range(0, idx.shape[0], step):
            sel = idx[s : s + step]
            nn = nf[sel, None].astype(np.float64)
            fail = (nf[sel] - cf[sel])[:, None].astype(np.float64)
            active = j[None, :] < kf[sel, None]
            num = np.maximum(fail - j, 0.0)
            den = np.where(active, nn - j, 1.0)
            ratio = np.where(active, num / den, 1.0).prod(axis=1)
            out[sel] = 1.0 - ratio
    out = out.reshape(shape)
    return float(out) if out.ndim == 0 else out


def pass_at_k_table(
    problem_idx: Any,
    correct: Any,
    ks: Sequence[int] | None = None,
    *,
    cluster: Any = None,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """pass@k for several k: mean over questions with SE and CI over questions.

    Args:
        problem_idx: Question id per sample row.
        correct: 0/1 (or bool) per row; NaN marks a failed request (excluded).
        ks: The k values. Default: 1, 2, 4, 8, … up to the largest number of valid samples
            a question has (the run's repeat count), plus that number itself. Questions with
            fewer than k valid samples (some requests failed) cannot estimate pass@k and are
            left out of that row; its ``n_items`` says how many remain, so a row computed on
            fewer questions is visible rather than silently dropped. (Capping k at the
            *smallest* count instead would let one failed request erase pass@K entirely.)
        cluster: Optional cluster label per row (a question's first row decides); when
            given, the SE is clustered.
        level: Confidence level.

    Returns:
        ``{"<k>": {k, mean, se, ci_low, ci_high, n_items, se_method, ci_method}}``; the
        interval is ``score_interval``'s.
    """
    r = _as_float(correct)
    ids, inv, first = _group(problem_idx)
    valid = np.isfinite(r)
    g = ids.shape[0]
    n_i = np.bincount(inv[valid], minlength=g)
    c_i = np.bincount(inv[valid], weights=(r[valid] > 0.5).astype(np.float64), minlength=g)
    keep = n_i > 0
    n_i, c_i = n_i[keep], np.rint(c_i[keep]).astype(np.int64)
    clus = _item_labels(cluster, first, keep)
    if n_i.size == 0:
        return {}
    if ks is None:
        ks = _default_ks(int(n_i.max()))
    table: dict[str, dict[str, Any]] = {}
    for k in sorted({int(k) for k in ks}):
        if k < 1:
            continue
        use = n_i >= k
        vals = pass_at_k(n_i[use], c_i[use], k) if use.any() else np.array([])
        res = score_interval(vals, None if clus is None else clus[use], level)
        table[str(k)] = {
            "k": k,
            "mean": res["mean"],
            "se": res["se"],
            "ci_low": res["ci_low"],
            "ci_high": res["ci_high"],
            "n_items": int(use.sum()),
            "se_method": res["se_method"],
            "ci_method": res["ci_method"],
        }
    return table


def maj_at_k(
    problem_idx: Any,
    extracted: Any,
    correct_flags: Any,
    ks: Sequence[int],
    *,
    repeat: Any = None,
    cluster: Any = None,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """maj@k: a question counts as solved when the majority answer of k samples is correct.

    Rules (deterministic, so two runs of the same data agree):

    * Samples are taken in repeat order (``repeat`` if given, else row order within a
      question); failed requests (NaN ``correct_flags``) are skipped, so "the first k" means
      the first k *valid* samples. Questions with fewer than k valid samples are left out of
      that k (``n_items`` reports how many remain).
    * A sample with no extracted answer (None or "") abstains; if every one of the k samples
      abstains, the question scores 0.
    * Ties between answers with equal votes go to the answer that appeared first (earliest
      repeat), i.e. the one the model committed to first.
    * The majority answer's correctness is the mean correctness of the samples that gave it
      (identical answers are normally scored identically, so this is 0 or 1).

    Args:
        problem_idx: Question id per row.
        extracted: Extracted answer per row (strings; None = no answer).
        correct_flags: 0/1 per row, NaN for failed requests.
        ks: The k values.
        repeat: Optional repeat index per row, used for ordering.
        cluster: Optional cluster per row (first row of a question decides).
        level: Confidence level.

    Returns:
        ``{"<k>": {k, mean, se, ci_low, ci_high, n_items, se_method, ci_method}}``; the
        interval is ``score_interval``'s.
    """
    corr = _as_float(correct_flags)
    ids, inv, first = _group(problem_idx)
    g = ids.shape[0]
    item_clus = None if cluster is None else np.asarray(cluster, dtype=object)[first]
    k_list = [k for k in sorted({int(k) for k in ks}) if k >= 1]
    n_valid = np.zeros(g, dtype=np.int64)
    scores = {k: np.zeros(g) for k in k_list}
    ext = np.asarray(extracted, dtype=object)
    rep = None if repeat is None else np.asarray(repeat)
    # Every statistic here is per question, so rows are voted on a block of whole questions
    # at a time when they come grouped by question (a store's rows do): the same scores,
    # with row-sized temporaries of one block instead of the whole run (they peaked at
    # ~90 MB for 1,000,000 rows).
    for lo, hi, qlo, qhi in _question_blocks(inv, first):
        votes = _votes(inv[lo:hi] - qlo, qhi - qlo, ext[lo:hi], corr[lo:hi],
                       None if rep is None else rep[lo:hi])
        n_valid[qlo:qhi] = votes.n_valid
        for k in k_list:
            scores[k][qlo:qhi] = _majority_scores(votes, k, qhi - qlo)
        del votes
    out: dict[str, dict[str, Any]] = {}
    for k in k_list:
        eligible = n_valid >= k
        score = scores[k]
        res = score_interval(
            score[eligible], None if item_clus is None else item_clus[eligible], level
        )
        out[str(k)] = {
            "k": k,
            "mean": res["mean"],
            "se": res["se"],
            "ci_low": res["ci_low"],
            "ci_high": res["ci_high"],
            "n_items": int(eligible.sum()),
            "se_method": res["se_method"],
            "ci_method": res["ci_method"],
        }
    return out


_BLOCK_ROWS = 65536


def _question_blocks(inv: np.ndarray, first: np.ndarray) -> list[tuple[int, int, int, int]]:
    """`(row_lo, row_hi, q_lo, q_hi)` blocks of ~`_BLOCK_ROWS` rows holding whole questions
    (questions q_lo..q_hi-1 are exactly rows row_lo..row_hi-1), when the rows are grouped by
    question in question order; otherwise one block of everything."""
    n, g = inv.shape[0], first.shape[0]
    if n <= _BLOCK_ROWS or not (np.all(inv[1:] >= inv[:-1]) and np.all(first[1:] > first[:-1])):
        return [(0, n, 0, g)]
    out = []
    q_lo = 0
    while q_lo < g:
        lo = int(first[q_lo])
        q_hi = max(q_lo + 1, int(np.searchsorted(first, lo + _BLOCK_ROWS, side="left")))
        hi = int(first[q_hi]) if q_hi < g else n
        out.append((lo, hi, q_lo, q_hi))
        q_lo = q_hi
    return out


@dataclass(frozen=True)
class _Votes:
    """The valid samples in (question, repeat) order, each with its answer's code.

    ``q`` is each sample's question, ``rank`` its position among its question's valid samples,
    ``votes`` whether it gave an answer, ``pair`` a code unique per (question, answer),
    ``n_ans`` the number of distinct answers, ``correct`` its 0/1 score and ``n_valid`` the
    valid samples per question.
    """

    q: np.ndarray
    rank: np.ndarray
    votes: np.ndarray
    pair: np.ndarray
    n_ans: int
    correct: np.ndarray
    n_valid: np.ndarray


def _votes(inv: np.ndarray, g: int, extracted: Any, corr: np.ndarray, repeat: Any) -> _Votes:
    """Order the valid samples by question and repeat, and code their answers."""
    ext = np.asarray(extracted, dtype=object)
    order_key = np.arange(inv.shape[0]) if repeat is None else np.asarray(repeat, dtype=np.float64)
    valid = np.isfinite(corr)
    rows = np.flatnonzero(valid)
    # sort valid rows by (question, repeat order, original position) - lexsort: last key major
    ki, ko = inv[rows], order_key[rows]
    del order_key  # (row-sized temporaries go as soon as they are used: the peak at 1M rows)
    same_q = ki[1:] == ki[:-1]
    if not (np.all(ki[1:] >= ki[:-1]) and np.all((ko[1:] >= ko[:-1]) | ~same_q)):
        # not already in (question, repeat) order, as a store's rows are: sort them
        rows = rows[np.lexsort((rows, ko, ki))]
    del ki, ko, same_q
    q = inv[rows]
    n_valid = np.bincount(q, minlength=g)
    starts = np.concatenate(([0], np.cumsum(n_valid)[:-1]))
    rank = np.arange(rows.shape[0]) - starts[q]
    answers = ext[rows]
    if set(map(type, answers)) <= {str}:  # (no list of the answers: 8 bytes a row saved)
        # Only strings (the usual extracted column): one vectorised comparison, and str()
        # of a str is itself.
        votes = np.asarray(answers != "", dtype=bool).reshape(-1)
        voted = answers[votes]
    else:
        votes = np.array(
            [not (a is None or a == "" or _is_missing(a)) for a in answers.tolist()], dtype=bool
        )
        voted = np.array([str(a) for a in answers[votes]], dtype=object)
    del answers
    acode = np.full(rows.shape[0], -1, dtype=np.int64)
    if votes.any():
        acode[votes] = _codes(voted)
    del voted
    n_ans = int(acode.max()) + 1 if votes.any() else 1
    pair = q.astype(np.int64) * n_ans + acode
    return _Votes(q, rank, votes, pair, n_ans, corr[rows], n_valid)


def _majority_scores(v: _Votes, k: int, g: int) -> np.ndarray:
    """Each question's maj@k score: the correctness of the answer most of its first k gave."""
    score = np.zeros(g)
    sel = (v.rank < k) & v.votes
    if sel.any():
        pairs, pinv, counts = np.unique(v.pair[sel], return_inverse=True, return_counts=True)
        pinv = pinv.reshape(-1)
        first_rank = np.full(pairs.shape[0], np.iinfo(np.int64).max)
        np.minimum.at(first_rank, pinv, v.rank[sel])
        pcorr = np.bincount(pinv, weights=v.correct[sel], minlength=pairs.shape[0]) / counts
        pq = pairs // v.n_ans
        # winner per question: most votes, then earliest first appearance
        o = np.lexsort((first_rank, -counts, pq))
        is_first = np.ones(o.shape[0], dtype=bool)
        is_first[1:] = pq[o][1:] != pq[o][:-1]
        win = o[is_first]
        score[pq[win]] = pcorr[win]
    return score
