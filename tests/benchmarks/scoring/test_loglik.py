"""Log-likelihood scoring's arithmetic against lm-evaluation-harness's own functions."""

from __future__ import annotations

import math

import pytest

from benchmarks.scoring.loglik import argmax, count_words, mcq_metrics, perplexity_metrics


def test_acc_and_acc_norm_pick_differently_when_lengths_differ() -> None:
    # The short option has the higher total, the long one the higher per-character value.
    choices = ["a cat", "a very long and detailed answer"]
    lls = [-5.0, -6.0]
    assert mcq_metrics(lls, choices, gold=0) == {"acc": 1.0, "acc_norm": 0.0, "acc_bytes": 0.0}
    assert mcq_metrics(lls, choices, gold=1) == {"acc": 0.0, "acc_norm": 1.0, "acc_bytes": 1.0}


def test_acc_norm_divides_by_characters_acc_bytes_by_utf8_bytes() -> None:
    # "éé" is 2 characters, 4 bytes: per character "abc" wins, per byte "éé" does.
    lls, choices = [-2.0, -2.7], ["éé", "abc"]
    assert mcq_metrics(lls, choices, 1)["acc_norm"] == 1.0
    assert mcq_metrics(lls, choices, 0)["acc_bytes"] == 1.0


def test_ties_go_to_the_first_option_as_numpy_argmax() -> None:
    assert argmax([-1.0, -1.0, -3.0]) == 0


def test_mcq_metrics_match_lm_eval_process_results() -> None:
    np = pytest.importorskip("numpy")
    lls = [-12.5, -9.25, -30.0, -9.5]
    choices = ["Paris", "the city of Lyon", "Marseille, by the sea", "Nice"]
    completion_len = np.array([float(len(c)) for c in choices])
    for gold in range(4):
        got = mcq_metrics(lls, choices, gold)
        assert got["acc"] == float(np.argmax(lls) == gold)
        assert got["acc_norm"] == float(np.argmax(np.array(lls) / completion_len) == gold)


def test_perplexities_equal_lm_eval_aggregations() -> None:
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity

    docs = [(-120.5, "Once upon a time there was a cat.\nIt sat."), (-80.25, "Héllo wörld  again")]
    ll = sum(d[0] for d in docs)
    words = sum(count_words(t) for _, t in docs)
    nbytes = sum(len(t.encode()) for _, t in docs)
    got = perplexity_metrics(ll, words, nbytes)
    assert got["word_perplexity"] == pytest.approx(
        weighted_perplexity([(lp, count_words(t)) for lp, t in docs]))
    assert got["byte_perplexity"] == pytest.approx(
        weighted_perplexity([(lp, len(t.encode())) for lp, t in docs]))
    assert got["bits_per_byte"] == pytest.approx(
        bits_per_byte([(lp, len(t.encode())) for lp, t in docs]))
    assert got["bits_per_byte"] == pytest.approx(math.log2(got["byte_perplexity"]))


def test_words_counted_as_lm_eval_counts_them() -> None:
    from lm_eval.api.task import Task

    for text in ("a b  c", "one\n\ntwo three ", " lead"):
        assert count_words(text) == Task.count_words(text)
