"""Progress callbacks of the Python API (NeMo Evaluator's `ProgressTracker` protocol)."""

from __future__ import annotations

import sys
from typing import Protocol, TextIO, runtime_checkable


@runtime_checkable
class ProgressTracker(Protocol):
    """What `run_evaluation` reports while it runs: start, each sample, the end."""

    def on_start(self, benchmark: str, total_problems: int, total_repeats: int) -> None:
        """The run starts: how many problems, how many repeats each."""
        ...

    def on_step(self, problem: int, repeat: int, total_problems: int, total_repeats: int,
                reward: float, tokens: int | None, latency_ms: float) -> None:
        """One sample is scored (reward 0.0 for a failed request)."""
        ...

    def on_phase(self, problem: int, repeat: int, total_problems: int, total_repeats: int,
                 phase: str) -> None:
        """A sample enters a phase (`solving`, `verifying`); nel reports none yet."""
        ...

    def on_done(self, correct: int, total: int, elapsed: float, total_tokens: int,
                mean_reward: float | None = None) -> None:
        """The run ended."""
        ...


class NoOpProgress:
    """Reports nothing (the default)."""

    def on_start(self, benchmark: str, total_problems: int, total_repeats: int) -> None:
        """Nothing."""

    def on_step(self, problem: int, repeat: int, total_problems: int, total_repeats: int,
                reward: float, tokens: int | None, latency_ms: float) -> None:
        """Nothing."""

    def on_phase(self, problem: int, repeat: int, total_problems: int, total_repeats: int,
                 phase: str) -> None:
        """Nothing."""

    def on_done(self, correct: int, total: int, elapsed: float, total_tokens: int,
                mean_reward: float | None = None) -> None:
        """Nothing."""


class ConsoleProgress(NoOpProgress):
    """One line per 10% of samples and a final summary, on stderr."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._done = 0
        self._total = 0
        self._name = ""

    def on_start(self, benchmark: str, total_problems: int, total_repeats: int) -> None:
        """Print the run's size."""
        self._name, self._done, self._total = benchmark, 0, total_problems * total_repeats
        print(f"{benchmark}: {total_problems} problems x {total_repeats} repeats", file=self.stream)

    def on_step(self, problem: int, repeat: int, total_problems: int, total_repeats: int,
                reward: float, tokens: int | None, latency_ms: float) -> None:
        """Print at each tenth of the samples."""
        self._done += 1
        step = max(1, self._total // 10)
        if self._done % step == 0 or self._done == self._total:
            print(f"{self._name}: {self._done}/{self._total} samples", file=self.stream)

    def on_done(self, correct: int, total: int, elapsed: float, total_tokens: int,
                mean_reward: float | None = None) -> None:
        """Print the summary."""
        mean = "n/a" if mean_reward is None else f"{mean_reward:.4f}"
        print(f"{self._name}: {correct}/{total} correct, mean reward {mean}, "
              f"{total_tokens} tokens, {elapsed:.1f}s", file=self.stream)
