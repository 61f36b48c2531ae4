"""How a sandboxed program's death is read back as the limit that caused it."""

from __future__ import annotations

import signal

import pytest

from nel_resources.sandboxes.limits import stop_reason


@pytest.mark.parametrize(("code", "stderr", "reason"), [
    (128 + signal.SIGXCPU, b"", "cpu_time"),
    (-signal.SIGXFSZ, b"", "file_size"),
    (1, b"Traceback (most recent call last):\n  ...\nMemoryError\n", "memory"),
    (1, b"Traceback ...\nBlockingIOError: [Errno 11] Resource temporarily unavailable\n", "pids"),
    (254, b"bash: fork: Resource temporarily unavailable\n", "pids"),
    # dash (an image's /bin/sh) gives up on its own when a fork fails at the pids limit
    (2, b"sh: 1: Cannot fork\nsh: 1: sh: 1: Cannot fork\n", "pids"),
    (1, b"AssertionError\n", None),
    (0, b"sh: 1: Cannot fork\n", None),
])
def test_stop_reason(code: int, stderr: bytes, reason: str | None) -> None:
    assert stop_reason(code, stderr) == reason
