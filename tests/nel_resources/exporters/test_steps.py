"""A checkpoint's training step from its name, as trainers write them."""

from __future__ import annotations

import pytest

from nel_resources.exporters.steps import checkpoint_step


@pytest.mark.parametrize(("name", "step"), [
    ("step-3000", 3000), ("llama-step-3000", 3000), ("step_3000", 3000), ("step=3000", 3000),
    ("step3000", 3000), ("global_step3000", 3000), ("checkpoint-3000", 3000),  # Hugging Face
    ("iter_0003000", 3000),  # Megatron
    ("ckpt-12", 12), ("run2-step-500", 500), ("STEP-7", 7), ("m-step-0", 0),
    ("model.step-40.gguf", 40), ("a-step-1-step-2", 2),  # the last marker wins
])
def test_step_in_the_name(name: str, step: int) -> None:
    assert checkpoint_step(name) == step


@pytest.mark.parametrize("name", ["m", "ref-model", "substep-5", "llama-3-8b", "steps", "", None,
                                  "stepper-4", "qwen2.5-7b"])
def test_no_step(name: str | None) -> None:
    assert checkpoint_step(name) is None
