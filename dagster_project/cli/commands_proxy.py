"""`nel proxy`: serve one service's interceptor chain as a local OpenAI-compatible endpoint.

Only argparse is imported here; the server (aiohttp, the chain) is imported when it runs.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `proxy` command."""
    p = sub.add_parser(
        "proxy",
        help="serve a service's interceptor chain on 127.0.0.1 for agents nel does not drive",
        description=(
            "Start a local OpenAI-compatible proxy in front of one service of a config: every "
            "request to http://127.0.0.1:PORT/v1/{chat/completions,completions,responses} passes "
            "the service's `interceptors:` chain (streams too), /v1/models passes through, and "
            "the service's key is added upstream. Prints the base URL, then serves until "
            "SIGTERM or Ctrl-C. Prefix a path with /s/<id> to name an agent session; send "
            "X-Nel-Repeat: N to keep repeats apart in the cache."),
    )
    from nel_resources.proxy.arguments import add_proxy_arguments

    add_proxy_arguments(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from nel_resources.proxy.server import run

    return run(args)
