"""An OpenAI-compatible server process that records exactly what each request carried.

Every request's target (path and query string, as sent), its header lines (in order,
duplicates kept) and its body (parsed JSON, else text) are appended as one JSON line to
`--log`; chat and completion requests get a fixed answer. Unlike the reference server it
keeps the raw request, so a test can see a `Host` header, an `Authorization` header, a
query string or a request body on the wire.

With `--echo-digest` the answer is `request <digest>` instead, the digest naming the body
(`body_digest`): a tool's per-item results then say which request each item sent, so two
tools' requests can be compared item by item.

    python -m tests.support.recording_server --port-file PORT --log requests.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_LOCK = threading.Lock()


def body_digest(body: object) -> str:
    """A short digest of a request body (canonical JSON: key order does not count)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _answer(path: str, echo: str | None = None) -> bytes:
    text = f"request {echo}" if echo else "The answer is 42.\n#### 42"
    if path.endswith("/chat/completions"):
        choice = {"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "finish_reason": "stop", "text": text}
    return json.dumps({"id": "rec-1", "object": "chat.completion", "model": "tiny",
                       "choices": [choice],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                       }).encode()


def make_handler(log: Path, echo_digest: bool = False) -> type[BaseHTTPRequestHandler]:
    """A request handler appending each request (head and body) to `log`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as nel's clients expect

        def log_message(self, *args: object) -> None:  # quiet
            return

        def _record(self, body: object = None) -> None:
            entry = {"method": self.command, "target": self.path,
                     "headers": [[k, v] for k, v in self.headers.items()], "body": body}
            with _LOCK, log.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] == "/health":
                self._reply(200, b'{"status":"ok"}')
                return
            self._record()
            self._reply(200, b'{"object":"list","data":[{"id":"tiny","object":"model"}]}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body: object = json.loads(raw)
            except ValueError:
                body = raw
            self._record(body)
            echo = body_digest(body) if echo_digest else None
            self._reply(200, _answer(self.path.split("?", 1)[0], echo))

    return Handler


class _Server(ThreadingHTTPServer):
    # The default backlog (5) overflows under a client's 64 connections at once: refused
    # SYNs are retried by the kernel, and a request then waits out the client's timeout.
    request_queue_size = 512
    daemon_threads = True


def main() -> None:
    """Serve on 127.0.0.1 (a free port, written to --port-file) until killed."""
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--echo-digest", action="store_true",
                   help="answer `request <digest of the body>` (see body_digest)")
    a = p.parse_args()
    server = _Server(("127.0.0.1", 0), make_handler(Path(a.log), a.echo_digest))
    tmp = Path(a.port_file + ".tmp")
    tmp.write_text(str(server.server_address[1]))
    tmp.rename(a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
