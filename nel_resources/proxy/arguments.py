"""The proxy's command-line arguments, shared by `nel proxy` and
`python -m nel_resources.proxy.server` (argparse only: cheap to import)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_proxy_arguments(p: argparse.ArgumentParser, *, internal: bool = False) -> None:
    """Add the proxy's options to `p`. `internal` (the child process nel starts for a run):
    the service may come as JSON in an environment variable (`--service-env`) instead."""
    p.add_argument("-c", "--config", required=not internal,
                   help="the nel / NeMo Evaluator config YAML")
    if internal:
        # A run's resolved service, not a file: its literal key never touches the disk.
        p.add_argument("--service-env", help=argparse.SUPPRESS)
    p.add_argument("--service", help="the service whose chain to serve (default: the only one)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    p.add_argument("--port-file", type=Path, help="also write the bound port to this file")
    p.add_argument("--capture", type=Path, metavar="FILE",
                   help="append each exchange (session, request, answer, tokens, latency, "
                        "status; keys redacted) to this JSONL file")
    p.add_argument("--max-body-mb", type=float, metavar="MB",
                   help="largest request body taken, in MiB (default 64; larger: 413)")
    p.add_argument("--max-buffered-mb", type=float, metavar="MB",
                   help="request bodies in flight may hold this many MiB together (default "
                        "256; past it: 503 with Retry-After)")
    p.add_argument("--head-timeout", type=float, metavar="S",
                   help="seconds a request head may take to arrive (default 30; then 408)")
    p.add_argument("--body-timeout", type=float, metavar="S",
                   help="seconds a request body may take after its head (default 120; then 408)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="level of the interceptors' log lines on stderr (default INFO)")
