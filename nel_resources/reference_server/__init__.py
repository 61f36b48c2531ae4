"""Reference OpenAI-compatible server: a fast, deterministic test double with fault injection.

The throughput benchmark and the reliability tests run against this server, so it must cost
far less per request than any client we measure. It therefore speaks HTTP/1.1 directly on
an ``asyncio.Protocol`` (uvloop when installed): keep-alive, Content-Length bodies, in-order
answers to pipelined requests, and orjson for every body. No web framework.

Run it to try a config without a GPU::

    nel reference-server --port 8000 --answers answers.jsonl --reasoning-mode field --fail-rate 0.2

(or ``python -m nel_resources.reference_server`` with the same flags), or from Python with
:func:`start_reference_server`, which launches it as a child process.

Everything is deterministic. Answers come from ``--answers`` rows (exact sha256 of the
prompt first, then the first ``match`` substring), else ``--echo`` or ``--default-content``.
Faults are picked by hashing the request's prompt (+ seed) and only hit the first
``--fail-attempts`` attempts of that prompt, so a retrying client always gets through.
With ``--fault-per-request`` each of those attempts draws its fault afresh (hash of prompt
and attempt number), so the rates are per request rather than per prompt: the mix a
flaky production endpoint shows (``--fail-rate 0.1 --status-429-rate 0.05 --hang-rate 0.02
--reset-rate 0.01 --truncate-rate 0.01``).
Only ``/v1/*`` requests are counted in ``/stats``; ``/health`` and ``/stats`` are not.
``/stats`` also reports the requests in flight now and at most (``in_flight``,
``max_in_flight``), which is how tests see a client's concurrency from the outside.

Modules: `config` (options), `defaults` (the flags' defaults), `answers` (answer books, tool scripts), `app` (routing, stats,
faults), `completions` (the endpoints' answers), `replies` (bodies, streams, errors),
`transport` (HTTP/1.1 and `serve`), `cli`, `launch` (`start_reference_server`). The names
below load on first use (PEP 562): `nel --help` registers `nel reference-server`'s flags
from `cli`, which must not pull in the server.
"""


from __future__ import annotations

from typing import TYPE_CHECKING

from nel_resources.runtime.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from nel_resources.reference_server.answers import Answer, AnswerBook, ToolScript
    from nel_resources.reference_server.app import ReferenceApp
    from nel_resources.reference_server.cli import main
    from nel_resources.reference_server.config import ServerConfig
    from nel_resources.reference_server.launch import start_reference_server
    from nel_resources.reference_server.transport import serve

# name -> the module that defines it
_EXPORTS = {
    "Answer": "answers", "AnswerBook": "answers", "ToolScript": "answers",
    "ReferenceApp": "app", "main": "cli", "ServerConfig": "config",
    "start_reference_server": "launch", "serve": "transport",
}

__all__ = [
    "Answer",
    "AnswerBook",
    "ReferenceApp",
    "ServerConfig",
    "ToolScript",
    "main",
    "serve",
    "start_reference_server",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
