"""The reference server's command line: `nel reference-server` and
`python -m nel_resources.reference_server` take the same flags (argparse only, so
`nel --help` stays cheap)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from nel_resources.reference_server.defaults import DEFAULTS, REASONING_MODES, TRUNCATE_STYLES

DESCRIPTION = "Reference OpenAI-compatible server: a fast, deterministic test double with fault injection."


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """Add the server's options (one per `ServerConfig` field) to `p`."""
    d = DEFAULTS
    p.add_argument("--host", default=d["host"], help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=d["port"], help="0 = pick a free port")
    p.add_argument("--port-file", help="write the bound port here when ready")
    p.add_argument("--model-name", default=d["model_name"], help="listed by /v1/models")
    p.add_argument("--answers", help='JSONL rows {"match"|"sha256": ..., "content", "reasoning"}')
    p.add_argument("--default-content", default=d["default_content"])
    p.add_argument("--default-reasoning", default=d["default_reasoning"])
    p.add_argument("--echo", action="store_true", help="reply with the prompt")
    p.add_argument("--reasoning-mode", choices=REASONING_MODES, default=d["reasoning_mode"])
    p.add_argument(
        "--fail-rate",
        type=float,
        default=d["fail_rate"],
        help="fraction of distinct prompts that fail their first attempts",
    )
    p.add_argument("--fail-status", type=int, default=d["fail_status"])
    p.add_argument(
        "--fail-attempts",
        type=int,
        default=d["fail_attempts"],
        help="faults hit only a prompt's first N attempts",
    )
    p.add_argument("--status-429-rate", type=float, default=d["status_429_rate"])
    p.add_argument(
        "--retry-after", type=float, default=d["retry_after"], help="Retry-After seconds sent with 429"
    )
    p.add_argument("--delay-ms", type=float, default=d["delay_ms"])
    p.add_argument("--delay-ms-max", type=float, default=d["delay_ms_max"],
                   help="answers wait uniformly between --delay-ms and this")
    p.add_argument("--trickle", action="store_true",
                   help="send delayed answers in chunks spread over the delay")
    p.add_argument("--delay-match", default=d["delay_match"],
                   help="delay only requests whose body contains this text")
    p.add_argument("--hang-rate", type=float, default=d["hang_rate"])
    p.add_argument("--drop-rate", type=float, default=d["drop_rate"],
                   help="close the connection without answering (FIN)")
    p.add_argument("--reset-rate", type=float, default=d["reset_rate"],
                   help="reset the connection without answering (RST)")
    p.add_argument("--truncate-rate", type=float, default=d["truncate_rate"],
                   help="answer 200 with half the body (see --truncate-style)")
    p.add_argument("--truncate-style", choices=TRUNCATE_STYLES, default=d["truncate_style"],
                   help="json: a well-framed body of cut JSON; eof: the connection closes "
                   "mid-body; chunked: a chunked body whose last chunk never comes")
    p.add_argument("--fault-per-request", action="store_true",
                   help="draw every attempt's fault afresh (rates per request, not per prompt)")
    p.add_argument("--fault-match", help="inject the rate-drawn faults only into prompts "
                   "containing this text (the others are always answered)")
    p.add_argument("--status-429-first", type=int, default=d["status_429_first"],
                   help="answer 429 to the first N completion requests, whatever their prompt")
    p.add_argument("--barrier", type=int, default=d["barrier"],
                   help="hold successful replies until N requests are in flight at once")
    p.add_argument("--barrier-timeout", type=float, default=d["barrier_timeout"],
                   help="release the barrier after this many seconds (stats say timed_out)")
    p.add_argument("--require-api-key", help="answer 401 unless 'Authorization: Bearer KEY'")
    p.add_argument("--fail-always-status", type=int, help="every completion returns this status")
    p.add_argument("--echo-headers-status", type=int,
                   help="every request fails with this status, echoing its headers in the body")
    p.add_argument("--record-bodies", type=int, default=d["record_bodies"],
                   help="keep the last N request bodies in /stats (`bodies`)")
    p.add_argument("--tool-script", help='JSONL rows {"match", "turns": [{"tool_calls": '
                   '[{"name", "arguments"}]} | {"content"}], "repeat_last"}: answer with '
                   "scripted tool calls (see ToolScript)")
    p.add_argument("--match-conversation", action="store_true",
                   help="match answers, scripts and --fault-match against all user messages "
                   "of a chat (agents that add context messages after the task)")
    p.add_argument("--ignore-stream", action="store_true",
                   help='answer "stream": true with a whole JSON answer (a server that cannot stream)')
    p.add_argument("--no-logprobs", action="store_true",
                   help="answer logprobs: null on /v1/completions (a server without "
                   "echoed prompt log-probabilities)")

def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m nel_resources.reference_server`."""
    p = argparse.ArgumentParser(prog="python -m nel_resources.reference_server", description=DESCRIPTION)
    add_server_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve with the options parsed into `args` until SIGTERM or Ctrl-C."""
    import asyncio
    from dataclasses import fields

    from nel_resources.reference_server.config import ServerConfig
    from nel_resources.reference_server.transport import serve

    config = ServerConfig(**{f.name: getattr(args, f.name) for f in fields(ServerConfig)})
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        asyncio.run(serve(config))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(config))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    return run(build_parser().parse_args(argv))
