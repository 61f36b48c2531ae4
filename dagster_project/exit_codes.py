"""Exit statuses of `nel eval run`, `nel compare` and `nel gate` (shown in --help and in
docs/reference/exit-codes.md, which docs/gen_reference.py writes from this module).

`nel compare` and `nel gate` exit exactly as NeMo Evaluator 0.3.0's do, strict by default
(CI scripts written for it branch on these numbers): compare BLOCK 1, WARN or INCONCLUSIVE 2;
gate NO-GO 1, INCONCLUSIVE 2; 0 otherwise or with `--no-strict`. As there, 2 is also a usage
error (bad flags or files).

`nel eval run` (whose gates are nel's own: NeMo Evaluator's `eval run` runs none) says NO-GO
with 1, as `nel gate`, but INCONCLUSIVE with 3: its 2 must keep meaning "nothing ran", so a
CI step can tell a bad config from a run too small to decide. A failed evaluation takes
precedence over a verdict: a gate computed on an incomplete run is not a verdict on the
candidate.

Pure Python on purpose: `nel --help` imports this module and must not import Dagster.
"""

from __future__ import annotations

from collections.abc import Iterable

OK = 0
"""Every (benchmark, model) ran (or was up to date); every gate, if any, said GO."""
GATE_NO_GO = 1
"""The run completed and a gate said NO-GO (as `nel gate`)."""
USAGE = 2
"""Bad flags or config, or an unusable output directory or Dagster home (a file, read-only,
full): nothing ran, no request was sent."""
GATE_INCONCLUSIVE = 3
"""The run completed and a gate said INCONCLUSIVE, none NO-GO (`nel gate` exits 2 for it)."""
EVAL_FAILED = 4
"""A (benchmark, model) failed, every sample of one failed, or there was nothing to run."""
BUDGET_STOPPED = 5
"""A service's budget cap (`pricing.max_cost_usd`) stopped the run before every sample was
sent; what was answered is kept and a rerun continues (nothing else failed)."""
INTERRUPTED = 130
"""Ctrl-C (SIGINT), as shells report it."""

TABLE: list[tuple[int, str]] = [
    (OK, "every benchmark ran or was up to date; every gate (if any) is GO"),
    (GATE_NO_GO, "the run completed and a gate is NO-GO (as `nel gate`)"),
    (USAGE, "usage error: bad flags, config or output location; nothing ran"),
    (GATE_INCONCLUSIVE, "the run completed and a gate is INCONCLUSIVE, none NO-GO "
                        "(`nel gate` says 2, whose meaning here is a usage error)"),
    (EVAL_FAILED, "evaluation failed: a benchmark failed for a model, every sample of one "
                  "failed, or nothing ran (see <out>/checkpoint.json)"),
    (BUDGET_STOPPED, "a budget cap (services.<name>.pricing.max_cost_usd) stopped the run; "
                     "finished samples are kept and a rerun continues"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
]

# `nel gate` and `nel compare`, as NeMo Evaluator 0.3.0 (applied unless --no-strict).
GATE_EXIT: dict[str, int] = {"GO": OK, "NO-GO": 1, "INCONCLUSIVE": 2}
COMPARE_EXIT: dict[str, int] = {"PASS": OK, "BLOCK": 1, "WARN": 2, "INCONCLUSIVE": 2}


def epilog() -> str:
    """The exit-status table as plain text for `nel eval run --help`."""
    lines = ["exit status:"]
    lines += [f"  {code:<4} {text}" for code, text in TABLE]
    return "\n".join(lines)


def eval_run_status(n_failures: int, gate_decisions: Iterable[str | None], *,
                    budget_only: bool = False) -> int:
    """The exit status of `nel eval run` from its failures and the gates' decisions
    (`budget_only`: every failure is a budget cap's stop)."""
    if n_failures:
        return BUDGET_STOPPED if budget_only else EVAL_FAILED
    decisions = set(gate_decisions)
    if "NO-GO" in decisions:
        return GATE_NO_GO
    if decisions - {"GO"}:  # INCONCLUSIVE, or a gate without a decision
        return GATE_INCONCLUSIVE
    return OK
