"""Built-in benchmarks; importing this package registers them."""

from benchmarks.builtin import (
    agent_tasks,
    drop,
    gpqa,
    gsm8k,
    healthbench,
    humaneval,
    math500,
    mgsm,
    mmlu,
    mmlu_pro,
    simpleqa,
    triviaqa,
    xstest,
)

__all__ = ["agent_tasks", "drop", "gpqa", "gsm8k", "healthbench", "humaneval", "math500", "mgsm", "mmlu", "mmlu_pro",
           "simpleqa", "triviaqa", "xstest"]
