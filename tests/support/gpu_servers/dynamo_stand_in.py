"""Stand-ins for an NVIDIA Dynamo deployment (tests only): `nats-server`, `etcd`,
`python -m dynamo.frontend` and `python -m dynamo.sglang`, for machines without GPUs, Dynamo
or its infrastructure.

Each parses its tool's real flags strictly (an unknown flag exits 2) and behaves, on
127.0.0.1, as much like the real one as nel can observe:

- `nats-server -js [-a HOST] [-p PORT] [-sd DIR]`: a TCP server speaking the start of the
  NATS protocol (`INFO {...}` on connect, `PONG` to `PING`), with `"jetstream": true` only
  under `-js` (Dynamo needs JetStream);
- `etcd --listen-client-urls URL --advertise-client-urls URL [--listen-peer-urls URL]
  [--data-dir DIR]`: etcd's v3 JSON gateway (`/v3/kv/put`, `/v3/kv/range`,
  `/v3/kv/deleterange`, base64 keys) and `/health`, and it binds its peer port;
- `python -m dynamo.sglang --model-path M [--served-model-name S] [--tp-size N] ...
  [--disaggregation-mode prefill|decode] [--disaggregation-bootstrap-port P]`: refuses to
  start without `NATS_SERVER` / `ETCD_ENDPOINTS` pointing at a NATS with JetStream and an etcd,
  or without the GPUs its sizes need; records what it was asked (NEL_STANDIN_RECORD); waits
  NEL_STANDIN_HEALTH_DELAY (`never`: keeps "loading" and never registers; also
  NEL_STANDIN_DYNAMO_STUCK=<role> for one role only); a decode or aggregated worker starts
  nel's reference server (the "engine", NEL_STANDIN_ANSWERS) on a free port; then it
  registers in etcd under `v1/instances/dynamo/<component>/generate/<id>` (component
  `backend`, `prefill` or `decode`) and deregisters on SIGTERM;
- `python -m dynamo.frontend [--http-host H] [--http-port P]`: the OpenAI endpoint. `/health`
  answers 200 with the registered `instances` (as the real one, before any worker too);
  `/v1/models` lists the served names; a completion is forwarded to a registered `backend`
  or, disaggregated, to a `decode` worker once a `prefill` worker is registered too (503
  otherwise), and each forward is appended to NEL_STANDIN_RECORD.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from stand_in import REPO, _sglang

PREFIX = "v1/instances/"


def _record(entry: dict[str, Any]) -> None:
    path = os.environ.get("NEL_STANDIN_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def _no_proxy() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with _no_proxy().open(req, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


# -- nats-server ---------------------------------------------------------------------------

def nats(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="nats-server", allow_abbrev=False)
    p.add_argument("-js", "--jetstream", action="store_true")
    p.add_argument("-a", "--addr", "--net", default="0.0.0.0")
    p.add_argument("-p", "--port", type=int, default=4222)
    p.add_argument("-sd", "--store_dir")
    ns = p.parse_args(argv)
    if ns.store_dir:
        Path(ns.store_dir, "jetstream").mkdir(parents=True, exist_ok=True)
    info = json.dumps({"server_id": "STANDIN", "version": "2.10.0", "jetstream": ns.jetstream,
                       "host": ns.addr, "port": ns.port, "max_payload": 1048576})

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(f"INFO {info}\r\n".encode())
            for line in self.rfile:
                if line.strip().upper() == b"PING":
                    self.wfile.write(b"PONG\r\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer((ns.addr, ns.port), Handler)
    server.daemon_threads = True
    print(f"[INF] Starting nats-server (stand-in), JetStream {'enabled' if ns.jetstream else 'off'}", flush=True)
    print(f"[INF] Listening for client connections on {ns.addr}:{ns.port}", flush=True)
    server.serve_forever()


def nats_ok(url: str) -> str | None:
    """None when `url` is a NATS server with JetStream, else what is wrong."""
    u = urlsplit(url)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=5) as s:
            f = s.makefile("rb")
            line = f.readline()
            if not line.startswith(b"INFO "):
                return f"{url} does not speak NATS"
            if not json.loads(line[5:]).get("jetstream"):
                return f"{url}: JetStream is not enabled (start nats-server with -js)"
            s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            return None if f.readline().strip() == b"PONG" else f"{url}: no PONG"
    except OSError as exc:
        return f"cannot connect to NATS at {url}: {exc}"


# -- etcd ------------------------------------------------------------------------------------

def etcd(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="etcd", allow_abbrev=False)
    p.add_argument("--listen-client-urls", default="http://localhost:2379")
    p.add_argument("--advertise-client-urls", default="http://localhost:2379")
    p.add_argument("--listen-peer-urls", default="http://localhost:2380")
    p.add_argument("--data-dir")
    p.add_argument("--name", default="default")
    ns = p.parse_args(argv)
    Path(ns.data_dir or f"{ns.name}.etcd", "member").mkdir(parents=True, exist_ok=True)
    store: dict[str, str] = {}
    lock = threading.Lock()
    peer = urlsplit(ns.listen_peer_urls.split(",")[0])
    peer_sock = socket.socket()
    peer_sock.bind((peer.hostname or "127.0.0.1", peer.port or 2380))  # a clash fails as etcd's would
    peer_sock.listen()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, body: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send({"health": "true"} if self.path == "/health" else {"error": "not found"},
                       200 if self.path == "/health" else 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            key = base64.b64decode(body.get("key", "")).decode()
            end = base64.b64decode(body.get("range_end", "")).decode() if body.get("range_end") else None
            with lock:
                if self.path == "/v3/kv/put":
                    store[key] = base64.b64decode(body.get("value", "")).decode()
                    return self._send({"header": {}})
                hit = sorted(k for k in store if (k == key if end is None else key <= k < end))
                if self.path == "/v3/kv/range":
                    return self._send({"kvs": [{"key": _b64(k), "value": _b64(store[k])} for k in hit],
                                       "count": str(len(hit))})
                if self.path == "/v3/kv/deleterange":
                    for k in hit:
                        del store[k]
                    return self._send({"deleted": str(len(hit))})
            self._send({"error": "not found"}, 404)

    client = urlsplit(ns.listen_client_urls.split(",")[0])
    server = ThreadingHTTPServer((client.hostname or "127.0.0.1", client.port or 2379), Handler)
    print(f"etcd (stand-in): serving client requests on {client.netloc}, peers on {peer.netloc}", flush=True)
    server.serve_forever()


def instances(etcd_url: str) -> list[dict[str, Any]]:
    """Every registration under v1/instances/ (prefix range: end = prefix with its last byte + 1)."""
    end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)
    kvs = _post(f"{etcd_url}/v3/kv/range", {"key": _b64(PREFIX), "range_end": _b64(end)}).get("kvs", [])
    return [json.loads(base64.b64decode(kv["value"])) for kv in kvs]


# -- python -m dynamo.sglang -------------------------------------------------------------------

def worker(argv: list[str]) -> None:
    # sglang's own flags, plus those of its disaggregation and what the example configs pass
    extra = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    extra.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    extra.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    extra.add_argument("--disable-flashinfer-autotune", action="store_true")
    known, rest = extra.parse_known_args(argv)
    ns = _sglang(rest)
    role = {"null": "backend"}.get(known.disaggregation_mode, known.disaggregation_mode)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d for d in (visible or "").split(",") if d.strip()]
    _record({"tool": "dynamo.sglang", "argv": argv, "role": role, "cuda_visible_devices": visible,
             "env": {k: os.environ.get(k) for k in ("DYN_REQUEST_PLANE", "NATS_SERVER", "ETCD_ENDPOINTS",
                                                   "DYN_SKIP_SGLANG_LOG_FORMATTING", "UCX_TLS",
                                                   "SGLANG_ENABLE_JIT_DEEPGEMM")},
             "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "hostname": os.environ.get("SLURMD_NODENAME"),
             "pid": os.getpid()})
    print(f"INFO dynamo.sglang stand-in: {role} worker for {ns.served!r}, {ns.gpus} GPU(s) needed, "
          f"CUDA_VISIBLE_DEVICES={visible}", flush=True)
    nats_url, etcd_url = os.environ.get("NATS_SERVER"), os.environ.get("ETCD_ENDPOINTS")
    if os.environ.get("DYN_REQUEST_PLANE") != "nats" or not nats_url or not etcd_url:
        print("RuntimeError: DYN_REQUEST_PLANE=nats, NATS_SERVER and ETCD_ENDPOINTS must be set", flush=True)
        raise SystemExit(1)
    problem = nats_ok(nats_url)
    if problem:
        print(f"RuntimeError: {problem}", flush=True)
        raise SystemExit(1)
    if len(devices) < ns.gpus:
        print(f"RuntimeError: {ns.gpus} GPUs are needed (tensor x pipeline x data parallel) "
              f"but {len(devices)} are visible (CUDA_VISIBLE_DEVICES={visible})", flush=True)
        raise SystemExit(1)
    delay = os.environ.get("NEL_STANDIN_HEALTH_DELAY", "0")
    if delay == "never" or os.environ.get("NEL_STANDIN_DYNAMO_STUCK") == role:
        while True:  # stuck loading its weights: never registers
            print("INFO Loading model weights ... (stuck)", flush=True)
            time.sleep(1)
    print(f"INFO Loading model weights took {float(delay):.2f} s", flush=True)
    time.sleep(float(delay))
    transport: dict[str, str] = {}
    engine = None
    if role != "prefill":  # the worker that answers: nel's reference server behind it
        port_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"dynamo-standin-{os.getpid()}.port"
        args = [os.environ.get("NEL_STANDIN_PYTHON", sys.executable), "-P", str(REPO / "nel_resources" / "reference_server" / "__main__.py"),
                "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file), "--model-name", ns.served]
        if os.environ.get("NEL_STANDIN_ANSWERS"):
            args += ["--answers", os.environ["NEL_STANDIN_ANSWERS"]]
        engine = subprocess.Popen(args)
        while not (port_file.exists() and port_file.read_text().strip()):
            if engine.poll() is not None:
                raise SystemExit(f"the engine exited with status {engine.returncode}")
            time.sleep(0.05)
        transport = {"http": f"http://127.0.0.1:{port_file.read_text().strip()}"}
        port_file.unlink()
    key = f"{PREFIX}dynamo/{role}/generate/{os.getpid():x}"
    _post(f"{etcd_url}/v3/kv/put", {"key": _b64(key), "value": _b64(json.dumps(
        {"namespace": "dynamo", "component": role, "endpoint": "generate", "instance_id": os.getpid(),
         "model": ns.served, "transport": transport}))})
    print(f"INFO registered {key} in etcd at {etcd_url}", flush=True)

    def bye(*_: Any) -> None:
        with contextlib.suppress(OSError):
            _post(f"{etcd_url}/v3/kv/deleterange", {"key": _b64(key)})
        if engine is not None:
            engine.terminate()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, bye)
    while True:
        time.sleep(1)


# -- python -m dynamo.frontend -----------------------------------------------------------------

def frontend(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="dynamo.frontend", allow_abbrev=False)
    p.add_argument("--http-host", default="0.0.0.0")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--router-mode", choices=["round-robin", "random", "kv", "direct"], default="round-robin")
    p.add_argument("--namespace", default="dynamo")
    ns = p.parse_args(argv)
    etcd_url, nats_url = os.environ.get("ETCD_ENDPOINTS"), os.environ.get("NATS_SERVER")
    if not etcd_url or not nats_url or nats_ok(nats_url):
        print(f"Error: cannot reach etcd ({etcd_url}) and NATS ({nats_url}): "
              f"{nats_ok(nats_url) if nats_url else 'NATS_SERVER is not set'}", flush=True)
        raise SystemExit(1)
    turn = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, status: int, data: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            inst = instances(etcd_url)
            if self.path == "/health":
                body = {"status": "healthy", "endpoints": sorted({i["endpoint"] for i in inst}),
                        "instances": [{k: i[k] for k in ("namespace", "component", "endpoint", "instance_id")}
                                      for i in inst]}
                return self._send(200, json.dumps(body).encode())
            if self.path == "/v1/models":
                names = sorted({i["model"] for i in inst})
                return self._send(200, json.dumps({"object": "list", "data": [
                    {"id": n, "object": "model", "owned_by": "dynamo"} for n in names]}).encode())
            self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            inst = instances(etcd_url)
            by = {c: [i for i in inst if i["component"] == c] for c in ("backend", "prefill", "decode")}
            targets = by["backend"] or (by["decode"] if by["prefill"] else [])
            if not targets:
                return self._send(503, json.dumps({"error": "no worker ready: "
                                                   f"{ {c: len(v) for c, v in by.items()} }"}).encode())
            model = json.loads(raw or b"{}").get("model")
            if model not in {t["model"] for t in targets}:
                return self._send(404, json.dumps({"error": f"Model not found: {model}"}).encode())
            target = targets[turn[0] % len(targets)]
            turn[0] += 1
            req = urllib.request.Request(target["transport"]["http"] + self.path, raw,
                                         {"Content-Type": "application/json"})
            try:
                with _no_proxy().open(req, timeout=300) as resp:
                    status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
            except urllib.error.HTTPError as exc:
                status, data, ctype = exc.code, exc.read(), "application/json"
            _record({"tool": "dynamo.frontend", "forwarded": self.path, "to": target["component"],
                     "instance_id": target["instance_id"], "status": status})
            self._send(status, data, ctype or "application/json")

    server = ThreadingHTTPServer((ns.http_host, ns.http_port), Handler)
    print(f"INFO dynamo.frontend stand-in listening on {ns.http_host}:{ns.http_port}", flush=True)
    server.serve_forever()


TOOLS = {"nats-server": nats, "etcd": etcd, "frontend": frontend, "sglang": worker}

if __name__ == "__main__":
    TOOLS[sys.argv[1]](sys.argv[2:])
