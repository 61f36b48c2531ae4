"""`nel reference-server`: a deterministic OpenAI-compatible server to try configs without a GPU.

Only argparse is imported here; the server is imported when it runs.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `reference-server` command."""
    p = sub.add_parser(
        "reference-server",
        help="serve nel's deterministic OpenAI-compatible test model (no GPU needed)",
        description=(
            "Serve /v1/chat/completions, /v1/completions, /v1/responses and /v1/models on "
            "127.0.0.1 with deterministic answers (from --answers rows, --echo or "
            "--default-content) and optional fault injection (rates of 5xx, 429, hangs, drops, "
            "resets, truncated bodies): point a config's service at it to try the config without "
            "a GPU or a real model. /stats shows what was received. Serves until SIGTERM or Ctrl-C."),
    )
    from nel_resources.reference_server.cli import add_server_arguments

    add_server_arguments(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from nel_resources.reference_server.cli import run

    return run(args)
