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


def checkpoint_family_step(name: str, pattern: str | None = None) -> tuple[str, int] | None:
    """(family, step) of a checkpoint name, or None when it names no step.

    The family is the name with its step marker removed ("llama-step-3000" -> "llama"; a
    bare "step-3000" is family ""), so checkpoints of one training run group together.
    With `pattern` (a regex with one group, `checkpoints.step_pattern`) its last match gives
    the step instead of the built-in markers; a group that is not a number is no step.

    >>> checkpoint_family_step("llama-step-3000"), checkpoint_family_step("run-ep7", r"ep(\\d+)")
    (('llama', 3000), ('run', 7))
    """
    if not name:
        return None
    if pattern is not None:
        from nel_resources.config.patterns import check_step_pattern

        matches = list(check_step_pattern(pattern).finditer(name))
        if not matches or not (matches[-1].group(1) or "").isdigit():
            return None
        m, step = matches[-1], int(matches[-1].group(1))
    else:
        found = list(_STEP.finditer(name))
        if not found:
            return None
        m, step = found[-1], int(found[-1].group(1))
    family = (name[:m.start()] + name[m.end():]).strip("-_.=/ ")
    return family, step
