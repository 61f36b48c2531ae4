"""lm-evaluation-harness tasks as nel benchmarks (`lm-eval://TASK`); needs `nel[lm-eval]`."""

from __future__ import annotations

from typing import Any

from benchmarks.lm_eval.tasks import require_lm_eval

__all__ = ["lm_eval_uri_factory", "require_lm_eval"]


def lm_eval_uri_factory(name: str) -> Any:
    """The factory the registry returns for `lm-eval://TASK`: it makes the environment
    with the user's params (`data_dir`, `include_path`, `num_fewshot`,
    `rolling_prefix`, `max_length`, ...) and the
    engine's `protocol` hint."""
    task = name.removeprefix("lm-eval://")
    from benchmarks.errors import NelError

    if not task:
        raise NelError(f"benchmark {name!r}: write `lm-eval://<task>` (an lm-eval task, "
                       "group or tag name)")
    require_lm_eval()
    from benchmarks.lm_eval.environment import LmEvalEnvironment

    def make(*, data_dir: str | None = None, include_path: str | None = None,
             num_fewshot: int | None = None, protocol: str = "completions",
             fewshot_as_multiturn: bool = False,
             rolling_prefix: str = "", max_length: int | None = None) -> LmEvalEnvironment:
        return LmEvalEnvironment(task, data_dir=data_dir, include_path=include_path,
                                 num_fewshot=num_fewshot, protocol=protocol,
                                 fewshot_as_multiturn=fewshot_as_multiturn,
                                 rolling_prefix=rolling_prefix, max_length=max_length)

    return make
