"""Config checks of the log-likelihood solver, without the solver.

`nel eval run` refuses a log-likelihood run that cannot work before anything is sent; the
check runs on every run, an unchanged rerun included, so it imports no client, event loop or
scoring code (`solvers.loglikelihood` has the solver itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchmarks.errors import NelError

if TYPE_CHECKING:
    from nel_resources.specs import RunSpec

__all__ = ["METRICS", "STYLES", "check_loglikelihood", "settings"]

METRICS = ("acc", "acc_norm", "acc_bytes")
STYLES = ("texts", "letters")
_KEYS = frozenset({"metric", "style"})


def settings(config: dict[str, Any] | None, where: str) -> tuple[str, str]:
    """(metric, style) of a `solver.config` block, checked."""
    cfg = dict(config or {})
    unknown = sorted(set(cfg) - _KEYS)
    if unknown:
        raise NelError(f"{where}: unknown key {unknown[0]!r} in solver.config "
                       f"(known: {', '.join(sorted(_KEYS))})")
    metric, style = str(cfg.get("metric", "acc")), str(cfg.get("style", "texts"))
    if metric not in METRICS:
        raise NelError(f"{where}: solver.config.metric must be one of {', '.join(METRICS)}, "
                       f"not {metric!r}")
    if style not in STYLES:
        raise NelError(f"{where}: solver.config.style must be one of {', '.join(STYLES)}, "
                       f"not {style!r}")
    return metric, style


def check_loglikelihood(run: RunSpec, env_class: Any = None) -> None:
    """Refuse, before any request, a log-likelihood run that cannot work (one line each):
    a benchmark without a log-likelihood form, a chat service, bad settings; and a benchmark
    that needs this solver run with another one.

    Args:
        run: the (benchmark, model) run.
        env_class: the benchmark's class (looked up by name when None).
    """
    if env_class is None:
        from benchmarks import get_factory
        from benchmarks.uri_schemes import scheme_of

        if scheme_of(run.env.name) is not None and run.solver.type != "loglikelihood":
            return  # URI benchmarks (gym://, lm-eval://) bring their own scoring
        try:
            env_class = get_factory(run.env.name)
        except NelError:
            return  # unknown names are refused elsewhere, with suggestions
    needs = getattr(env_class, "needs_solver", None)
    if run.solver.type != "loglikelihood":
        if needs == "loglikelihood":
            raise NelError(f"benchmark {run.benchmark!r} is scored by log-probabilities: add "
                           "`solver: {type: loglikelihood}` and use a completions service")
        return
    where = f"benchmark {run.benchmark!r}"
    settings(run.solver.config, where)
    if not hasattr(env_class, "loglik_item"):
        raise NelError(f"{where} has no log-likelihood form (solver type loglikelihood works "
                       "on mmlu, mmlu_pro, gpqa and perplexity)")
    protocol = run.service.config.protocol
    if protocol != "completions":
        raise NelError(
            f"{where}: service {run.service.name!r} speaks {protocol}: log-likelihood scoring "
            "needs a completions endpoint that echoes prompt log-probabilities (llama.cpp's "
            "server, vLLM, SGLang); set the service's `protocol: completions`")
