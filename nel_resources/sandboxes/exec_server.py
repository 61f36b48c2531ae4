"""The exec server nel starts inside a remote sandbox container (ECS Fargate's main container).

Standard library only: it runs under the image's own `python3`. It binds 127.0.0.1 in the
container and is reached through the SSH sidecar's tunnel, so nothing else can talk to it.
Run as `python3 exec_server.py` with NEL_EXEC_PORT (and NEL_EXEC_BIND); nel ships it base64'd
in the container's command (see `bootstrap_command`).

HTTP API (JSON bodies; a malformed request gets 400, never 500):
  GET  /health                     -> {"ok": true}
  POST /exec   {"cmd": str | [str], "timeout": s, "cwd"?, "env"?, "stdin_b64"?,
                "output_limit"?}   -> {"stdout", "stderr", "rc", "stopped", "truncated"}
  POST /upload {"path", "content_b64"} -> {"ok": true}
  GET  /download?path=...         -> the file's bytes (404 if missing)

A command runs in its own session; a timeout or output past the cap kills the whole group,
and so does the end of the command (nothing started by it keeps running).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

_MAX_BODY = 256 << 20


class BadRequest(Exception):
    """The request is malformed (answered 400)."""


def run_command(req: dict[str, Any]) -> dict[str, Any]:
    """Run one /exec request and return its JSON answer."""
    cmd = req.get("cmd")
    if isinstance(cmd, str) and cmd:
        argv: list[str] = ["/bin/bash", "-c", cmd] if os.path.exists("/bin/bash") else ["/bin/sh", "-c", cmd]
    elif isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
        argv = cmd
    else:
        raise BadRequest("'cmd' must be a non-empty string or list of strings")
    timeout = req.get("timeout", 180)
    limit = req.get("output_limit", 1 << 20)
    env = req.get("env") or {}
    if not isinstance(timeout, (int, float)) or timeout <= 0 or not isinstance(limit, int) \
            or limit < 0 or not isinstance(env, dict):
        raise BadRequest("'timeout' must be > 0, 'output_limit' an int >= 0, 'env' an object")
    stdin = base64.b64decode(req["stdin_b64"]) if req.get("stdin_b64") else None
    try:
        proc = subprocess.Popen(argv, cwd=req.get("cwd") or None, env={**os.environ, **env},
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        return {"stdout": "", "stderr": f"{argv[0]}: {e.strerror}\n", "rc": 127,
                "stopped": None, "truncated": False}
    over = threading.Event()
    bufs: list[bytearray] = [bytearray(), bytearray()]
    cut = [False, False]

    def pump(i: int, stream: Any) -> None:
        while chunk := stream.read1(1 << 16):
            room = limit - len(bufs[i])
            if len(chunk) > room:
                bufs[i] += chunk[:max(room, 0)]
                cut[i] = True
                over.set()
            else:
                bufs[i] += chunk

    pumps = [threading.Thread(target=pump, args=(i, s), daemon=True)
             for i, s in enumerate((proc.stdout, proc.stderr))]
    for t in pumps:
        t.start()
    if stdin is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    stopped = None
    while proc.poll() is None:
        if over.is_set():
            stopped = "output_limit"
            break
        if time.monotonic() > deadline:
            stopped = "timeout"
            break
        over.wait(0.02)
    # the command's whole session: its leftovers, or all of it when stopped
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for t in pumps:
        t.join(5)
    return {"stdout": bufs[0].decode("utf-8", "replace"), "stderr": bufs[1].decode("utf-8", "replace"),
            "rc": proc.returncode, "stopped": stopped, "truncated": cut[0] or cut[1]}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            self._json(200, {"ok": True})
        elif url.path == "/download":
            path = (parse_qs(url.query).get("path") or [""])[0]
            if not path:
                self._json(400, {"error": "missing ?path="})
            elif not os.path.isfile(path):
                self._json(404, {"error": f"no such file: {path}"})
            else:
                data = Path(path).read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        else:
            self._json(404, {"error": f"not found: {url.path}"})

    def do_POST(self) -> None:
        path = urlparse(self.path).path
        try:
            body = self._body()
            if path == "/exec":
                self._json(200, run_command(body))
            elif path == "/upload":
                target, content = body.get("path"), body.get("content_b64")
                if not isinstance(target, str) or not target or not isinstance(content, str):
                    raise BadRequest("'path' and 'content_b64' are required strings")
                data = base64.b64decode(content, validate=True)
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                Path(target).write_bytes(data)
                self._json(200, {"ok": True})
            else:
                self._json(404, {"error": f"not found: {path}"})
        except (BadRequest, binascii.Error, ValueError) as e:
            self._json(400, {"error": str(e)})
        except OSError as e:
            self._json(409, {"error": f"{e.strerror}: {e.filename}"})

    def _body(self) -> dict[str, Any]:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if n <= 0 or n > _MAX_BODY:
            raise BadRequest("a JSON body is required (at most 256 MiB)")
        try:
            body = json.loads(self.rfile.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest("the body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _json(self, code: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def bootstrap_command(port: int) -> list[str]:
    """The container command that writes this file into the container and starts it."""
    source = base64.b64encode(Path(__file__).read_bytes()).decode()
    return ["sh", "-c", f"echo {source} | base64 -d > /tmp/nel_exec_server.py && "
            f"NEL_EXEC_PORT={int(port)} NEL_EXEC_BIND=127.0.0.1 exec python3 /tmp/nel_exec_server.py"]


def main() -> None:
    """Serve until killed; prints `listening <port>` once bound (port 0 picks a free one)."""
    server = ThreadingHTTPServer((os.environ.get("NEL_EXEC_BIND", "127.0.0.1"),
                                  int(os.environ.get("NEL_EXEC_PORT", "19542"))), _Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
