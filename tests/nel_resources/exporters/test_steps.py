"""A checkpoint's training step from its name, as trainers write them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.exporters.bundle_content import bundle_content
from nel_resources.exporters.mlflow_settings import parse_settings
from nel_resources.exporters.steps import checkpoint_family_step, checkpoint_step


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


@pytest.mark.parametrize(("name", "pattern", "want"), [
    ("llama-step-3000", None, ("llama", 3000)), ("step-100", None, ("", 100)),
    ("a-step-5-final", None, ("a-final", 5)), ("run-ep7", r"ep(\d+)", ("run", 7)),
    ("run-ep7-ep9", r"ep(\d+)", ("run-ep7", 9)),  # the last match wins, as with the markers
    ("run-step-7", r"ep(\d+)", None),  # a pattern replaces the built-in markers
    ("m", None, None), ("run-epx", r"ep(\w+)", None),  # a group that is no number is no step
])
def test_family_and_step(name: str, pattern: str | None, want: tuple[str, int] | None) -> None:
    assert checkpoint_family_step(name, pattern) == want


def test_exports_log_at_the_configured_pattern_step(tmp_path: Path) -> None:
    settings = parse_settings({"copy_artifacts": False})
    doc = {"model": "run-ep7", "bundle": {"benchmark": "gsm8k", "model": "run-ep7", "score": {"mean": 0.5}}}
    assert bundle_content(doc, tmp_path / "eval-x.json", settings).step == 0  # no built-in marker
    doc["nel_config"] = {"checkpoints": {"step_pattern": r"ep(\d+)"}}
    assert bundle_content(doc, tmp_path / "eval-x.json", settings).step == 7
