"""A Tavily-compatible search server for tests (a real HTTP process on 127.0.0.1).

`python -m tests.support.tavily_standin PORT_FILE LOG` binds a free port, writes it to
PORT_FILE and answers `POST /search` (Tavily's API: `{query, max_results, ...}` ->
`{query, results: [{title, url, content, score}]}`) with one result whose content names the
query and carries `MARKER`. Every request (path, Authorization header, body) is appended to
LOG as one JSON line; `GET /health` answers 200. `start_tavily_standin()` runs it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Text every search result carries (to find it again in what the model was sent).
MARKER = "TAVILY-STANDIN-RESULT-5207"


def _handler(log: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, doc: object) -> None:
            out = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:
            self._reply(200 if self.path == "/health" else 404, {"status": "ok"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            with log.open("a") as f:
                f.write(json.dumps({"path": self.path, "authorization":
                                    self.headers.get("authorization"), "body": body}) + "\n")
            if self.path != "/search" or not isinstance(body, dict) or "query" not in body:
                self._reply(400, {"detail": "expected POST /search {query}"})
                return
            query = str(body["query"])
            self._reply(200, {"query": query, "answer": None, "response_time": 0.01, "results": [
                {"title": f"About {query}", "url": "https://search.example.test/1",
                 "content": f"{MARKER}: what the web says about {query}.", "score": 0.9}]})

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def start_tavily_standin(tmp: Path) -> tuple[object, str, Path]:
    """Start the stand-in; returns (its ManagedProcess, its base URL, its request log)."""
    from nel_resources.runtime.processes import ManagedProcess, wait_for_port_file
    from tests.support.realcomponents import REPO_ROOT

    port_file = Path(tempfile.mkdtemp(dir=tmp)) / "port"
    log = tmp / "tavily_requests.jsonl"
    proc = ManagedProcess([sys.executable, "-m", "tests.support.tavily_standin", str(port_file),
                           str(log)], cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT)},
                          name="tavily-standin")
    proc.start()
    try:
        port = wait_for_port_file(proc, port_file, what="the Tavily stand-in", timeout=60)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{port}", log


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Path(sys.argv[2])))
    tmp_port = Path(sys.argv[1] + ".tmp")
    tmp_port.write_text(str(server.server_address[1]))
    tmp_port.rename(sys.argv[1])  # whole or absent: the waiter never reads half a number
    server.serve_forever()
