"""Sandboxes: isolated places to run model-written code, one module per type.

See `base` for the interface; `make_factory` builds a configured type from a config block.
"""

from nel_resources.sandboxes.base import (
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxFactory,
    SandboxSpec,
    StopReason,
    VolumeMount,
    running,
)
from nel_resources.sandboxes.factory import SANDBOX_TYPES, make_factory
from nel_resources.sandboxes.limits import Limits

__all__ = ["SANDBOX_TYPES", "ExecResult", "Limits", "Sandbox", "SandboxError", "SandboxFactory",
           "SandboxSpec", "StopReason", "VolumeMount", "make_factory", "running"]
