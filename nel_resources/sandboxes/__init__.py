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

__all__ = ["ExecResult", "Sandbox", "SandboxError", "SandboxFactory", "SandboxSpec", "StopReason",
           "VolumeMount", "running"]
