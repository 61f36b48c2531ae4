"""User-facing errors: the CLI prints these as one clear line, never a traceback."""

from __future__ import annotations


class NelError(Exception):
    """A mistake the user can fix (bad config, missing data, unknown name).

    The message must say what to fix.
    """


class BenchmarkConfigError(NelError):
    """A benchmark entry of the config cannot build its environment (an unknown parameter,
    a bad value): the whole config is refused before any request, not the benchmark alone."""


class DataMissingError(NelError):
    """A benchmark's data is not available locally and cannot be downloaded."""
