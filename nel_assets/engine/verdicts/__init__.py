"""Paired comparisons and release gates, by nel's statistics and by NeMo Evaluator 0.3.0's rules."""
