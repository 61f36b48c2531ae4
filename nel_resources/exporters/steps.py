"""A checkpoint's training step, read from its name (`step-3000`, `checkpoint-3000`, `iter_0003000`).

Exporters log a checkpoint's scores against the step it was saved at, so a tracker plots a
series of checkpoints as a training curve. The names trainers write: Hugging Face's
`checkpoint-3000`, Megatron's `iter_0003000`, NeMo's and others' `step=3000` / `step_3000` /
`global_step3000`, `ckpt-3000`. A name without one is step 0 to the caller.
"""

from __future__ import annotations

import re

# A marker word not glued to a letter or digit before it ("substep-5" is not a step), an
# optional separator, then the number; the last marker in the name wins ("run2-step-3000").
_STEP = re.compile(r"(?:^|[^a-z0-9])(?:global[-_]?step|step|iter(?:ation)?|checkpoint|ckpt)[-_=]?(\d+)(?![0-9])",
                   re.IGNORECASE)


def checkpoint_step(name: str | None) -> int | None:
    """The training step in a checkpoint's name, or None when it names none.

    >>> checkpoint_step("llama-step-3000"), checkpoint_step("iter_0003000"), checkpoint_step("m")
    (3000, 3000, None)
    """
    if not name:
        return None
    found = _STEP.findall(name)
    return int(found[-1]) if found else None
