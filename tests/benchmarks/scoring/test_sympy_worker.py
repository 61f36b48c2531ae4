"""The sympy helper process of `math_equiv` (the `nel serve` path) runs under a memory cap."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from benchmarks.scoring import math_sympy


def _address_space_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            return line.split()[3]
    raise AssertionError("no address-space line in /proc/<pid>/limits")


def _compare_off_main_thread(a: str, b: str) -> object:
    """`_sympy_with_limit` from a worker thread: the path `nel serve` takes."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(math_sympy._sympy_with_limit(a, b, 30.0)))
    t.start()
    t.join(120)
    assert out, "the comparison did not return"
    return out[0]


def test_the_sympy_process_is_memory_capped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEL_MATH_WORKER_MEMORY_MB", "600")
    worker = math_sympy._Worker()
    monkeypatch.setattr(math_sympy, "_worker", worker)
    try:
        assert _compare_off_main_thread("x + 1", "1 + x")[0] is True
        assert worker._proc is not None
        assert _address_space_limit(worker._proc.pid) == str(600 * 1024 * 1024)
        assert _compare_off_main_thread("\\frac{1}{2}", "0.5")[0] is True
    finally:
        worker.close()
