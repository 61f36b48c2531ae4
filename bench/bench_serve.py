"""Throughput of `nel serve`: seed+verify pairs per second, against a ceiling and the peer.

One command serves the same BYOB benchmark (NeMo Evaluator's decorator style: a JSONL
dataset of 1000 `i + i` problems and a last-integer scorer, written to a temp dir) three
ways, and drives each with the same concurrent client in alternating rounds (`--client raw`, the
default: hand-built HTTP/1.1 requests on asyncio protocols, so that the client's own CPU,
which shares this machine's two cores with the server, weighs as little as it can;
`--client aiohttp`: the aiohttp client of the earlier figures):

- `nel serve` (N uvicorn workers; scoring in its worker-process pool);
- the ceiling: a bare FastAPI app with plain request->response routes doing the same work
  inline (`env.seed`, `env.verify` on the event loop, orjson in and out), run by uvicorn
  with the very settings `nel serve` uses (`benchmarks.serve.server_settings`: the same
  protocol class, parser, head deadline, keep-alive and shutdown limits; its plain app has
  no hot routes, so its requests take uvicorn's ASGI path) and the same worker count;
- NeMo Evaluator 0.3.0's own `nel serve` (its default settings, one worker), from the peer
  venv (`make peers`; `NEL_PEER_NEMO` names another `nel` of the peer; skipped if absent).

    .venv/bin/python bench/bench_serve.py --workers 1 --concurrency 64 --rounds 5 --duration 3

`--baseline DIR` also serves it with the `nel serve` of another checkout (e.g. the previous
main) in the same alternating rounds, and prints nel/baseline.

It prints every round, the medians and the ratios nel/ceiling and nel/peer, and each
server's CPU time per pair (its whole process tree: scoring workers included; less noisy
than pairs/s on a shared machine); the exit status is 0 when both ratios meet their targets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCH_NAME = "bench_serve_arith"
SIZE = 1000
PEER_NEL = ROOT / ".venv-peers" / "nemo-evaluator" / "bin" / "nel"

# NeMo Evaluator's BYOB style, which both tools serve: the scorer takes the last integer
# (cheap, like a regex scorer), so the figures measure the serving stack.
BYOB = f'''
import re

from nemo_evaluator import ScorerInput, benchmark, scorer

_INT = re.compile(r"-?\\d+")


@benchmark(name="{BENCH_NAME}", dataset="{BENCH_NAME}.jsonl",
           prompt="What is {{q}} + {{q}}? Answer with a number.", target_field="a")
@scorer
def last_int(sample: ScorerInput) -> dict:
    found = _INT.findall(sample.response)
    got = found[-1] if found else None
    return {{"correct": got == str(sample.target), "extracted": got}}
'''


def write_benchmark(folder: Path) -> Path:
    """Write the BYOB file and its dataset into `folder`; returns the file."""
    rows = "".join(json.dumps({"q": i, "a": str(2 * i)}) + "\n" for i in range(SIZE))
    (folder / f"{BENCH_NAME}.jsonl").write_text(rows)
    path = folder / f"{BENCH_NAME}.py"
    path.write_text(BYOB)
    return path


def ceiling_app() -> Any:
    """The ceiling: bare FastAPI routes doing what `nel serve` does for a valid request,
    inline and without its checks (`NEL_BENCH_BYOB` names the benchmark file)."""
    import orjson
    from fastapi import FastAPI
    from fastapi.responses import Response

    from benchmarks.plugins import resolve_benchmark_ref
    from benchmarks.serve import build_environment

    ref = os.environ["NEL_BENCH_BYOB"]
    env = build_environment(resolve_benchmark_ref(ref), imports=[ref])

    async def seed_session(request: Any) -> Response:
        body = orjson.loads(await request.body())
        seed = await env.seed(body.get("idx", 0))
        return Response(orjson.dumps(seed.to_dict()), media_type="application/json")

    async def verify(request: Any) -> Response:
        body = orjson.loads(await request.body())
        result = await env.verify(body["response"], body["expected"], **body.get("metadata", {}))
        return Response(orjson.dumps(result.to_dict()), media_type="application/json")

    async def health(request: Any) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    app = FastAPI()
    app.add_route("/seed_session", seed_session, methods=["POST"])
    app.add_route("/verify", verify, methods=["POST"])
    app.add_route("/health", health, methods=["GET"])
    return app


# ----------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nel_serve_cmd() -> list[str]:
    return [sys.executable, "-m", "dagster_project.cli.main", "serve"]


def _start(cmd: list[str], port: int, *, cwd: Path = ROOT,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env if env is not None else {**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # own process group: killed with its workers below
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {cmd}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.1)
    _stop(proc)
    raise TimeoutError(f"server did not start: {cmd}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


# ----------------------------------------------------------------------------- client


async def _drive(port: int, size: int, concurrency: int, warmup: float, duration: float) -> float:
    """Seed+verify pairs per second over `duration` s, after `warmup` s."""
    import aiohttp
    import orjson

    base = f"http://127.0.0.1:{port}"
    counting = False
    pairs = 0
    stop = False
    headers = {"content-type": "application/json"}

    async def worker(session: aiohttp.ClientSession, start: int) -> None:
        nonlocal pairs
        idx = start
        while not stop:
            async with session.post(
                f"{base}/seed_session", data=orjson.dumps({"idx": idx % size}), headers=headers
            ) as r:
                seed = orjson.loads(await r.read())
            body = {
                "response": f"The answer is {seed['expected_answer']}",
                "expected": seed["expected_answer"],
                "metadata": seed["metadata"],
            }
            async with session.post(
                f"{base}/verify", data=orjson.dumps(body), headers=headers
            ) as r:
                verdict = orjson.loads(await r.read())
                if r.status != 200 or verdict["reward"] != 1.0:
                    raise RuntimeError(f"bad verdict {r.status}: {verdict}")
            if counting:
                pairs += 1
            idx += concurrency

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(worker(session, i)) for i in range(concurrency)]
        await asyncio.sleep(warmup)
        counting = True
        t0 = time.perf_counter()
        await asyncio.sleep(duration)
        counting = False
        elapsed = time.perf_counter() - t0
        stop = True
        await asyncio.gather(*tasks)
    return pairs / elapsed


class _PairConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection doing seed+verify pairs back to back, with the
    least client work there is: request bytes built by hand, a response read by its
    Content-Length. On a 2-core machine the client shares the cores with the server under
    test; aiohttp's client costs more CPU per request than `nel serve` itself, so with it
    the figures measured the client more than the servers."""

    def __init__(self, port: int, size: int, start: int, step: int, done: asyncio.Future[None]) -> None:
        import orjson

        self._dumps, self._loads = orjson.dumps, orjson.loads
        self._host = f"127.0.0.1:{port}".encode()
        self._size, self._idx, self._step = size, start, step
        self._done = done
        self._buf = bytearray()
        self._seed: dict[str, Any] | None = None  # the seed whose verify is in flight
        self.pairs = 0
        self.counting = False
        self.stop = False

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._send_seed()

    def _post(self, path: bytes, body: bytes) -> None:
        self._transport.write(b"POST " + path + b" HTTP/1.1\r\nHost: " + self._host
                              + b"\r\nContent-Type: application/json\r\nContent-Length: "
                              + str(len(body)).encode() + b"\r\n\r\n" + body)

    def _send_seed(self) -> None:
        self._seed = None
        self._post(b"/seed_session", self._dumps({"idx": self._idx % self._size}))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end]).lower()
            at = head.find(b"content-length:")
            if at < 0:
                self._fail(f"a response without Content-Length: {head[:200]!r}")
                return
            length = int(head[at + 15:head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0 else None])
            if len(self._buf) < end + 4 + length:
                return
            status = int(head[9:12])
            body = self._loads(bytes(self._buf[end + 4:end + 4 + length]))
            del self._buf[:end + 4 + length]
            self._on_response(status, body)

    def _on_response(self, status: int, body: Any) -> None:
        if self._seed is None:  # the seed's answer: verify it
            if status != 200:
                self._fail(f"seed {status}: {body}")
                return
            self._seed = body
            self._post(b"/verify", self._dumps({"response": f"The answer is {body['expected_answer']}",
                                                "expected": body["expected_answer"],
                                                "metadata": body["metadata"]}))
            return
        if status != 200 or body.get("reward") != 1.0:
            self._fail(f"bad verdict {status}: {body}")
            return
        if self.counting:
            self.pairs += 1
        self._idx += self._step
        if self.stop:
            self._transport.close()
            if not self._done.done():
                self._done.set_result(None)
            return
        self._send_seed()

    def _fail(self, why: str) -> None:
        if not self._done.done():
            self._done.set_exception(RuntimeError(why))
        self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_exception(RuntimeError(f"connection lost: {exc}"))


async def _drive_raw(port: int, size: int, concurrency: int, warmup: float, duration: float) -> float:
    """`_drive` with `_PairConnection`s: the same pairs, the same checks, a leaner client."""
    loop = asyncio.get_running_loop()
    conns: list[_PairConnection] = []
    waits: list[asyncio.Future[None]] = []
    for i in range(concurrency):
        done: asyncio.Future[None] = loop.create_future()
        _, proto = await loop.create_connection(
            lambda i=i, done=done: _PairConnection(port, size, i, concurrency, done), "127.0.0.1", port)
        conns.append(proto)
        waits.append(done)
    await asyncio.sleep(warmup)
    for c in conns:
        c.counting = True
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    for c in conns:
        c.counting = False
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.stop = True
    await asyncio.gather(*waits)
    return sum(c.pairs for c in conns) / elapsed


def _measure(port: int, size: int, args: argparse.Namespace) -> float:
    drive = _drive_raw if args.client == "raw" else _drive
    try:
        import uvloop

        return uvloop.run(drive(port, size, args.concurrency, args.warmup, args.duration))
    except ImportError:
        return asyncio.run(drive(port, size, args.concurrency, args.warmup, args.duration))


def _tree_cpu(root: int) -> float:
    """CPU seconds (user + system) used so far by `root` and its live descendants (Linux
    /proc; 0 elsewhere)."""
    stats: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, total, grew = {root}, 0.0, True
    while grew:
        grew = False
        for pid, (ppid, _) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    for pid in tree:
        total += stats.get(pid, (0, 0.0))[1]
    return total


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 when both ratios meet their targets."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=1, help="uvicorn workers (nel and ceiling)")
    p.add_argument("--scoring-workers", type=int, default=None,
                   help="nel serve --scoring-workers (default: its own)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--duration", type=float, default=3.0, help="seconds per round")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per server")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--target", type=float, default=0.8, help="nel / ceiling")
    p.add_argument("--peer-target", type=float, default=2.0, help="nel / NeMo Evaluator")
    p.add_argument("--no-peer", action="store_true", help="skip NeMo Evaluator's serve")
    p.add_argument("--client", choices=("raw", "aiohttp"), default="raw",
                   help="the load generator: raw (hand-built HTTP/1.1 on asyncio protocols, the "
                        "least client CPU) or aiohttp (the client of earlier figures)")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="also run the `nel serve` of the checkout in DIR (e.g. the previous main)")
    p.add_argument("--ceiling-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.ceiling_server:
        import uvicorn

        from benchmarks.serve import server_settings

        # Exactly `nel serve`'s uvicorn settings and worker count, rebuilt per worker too.
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        uvicorn.run("bench_serve:ceiling_app", factory=True, workers=args.workers,
                    **server_settings("127.0.0.1", args.port))
        return 0

    peer_bin = Path(os.environ.get("NEL_PEER_NEMO") or PEER_NEL)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        byob = write_benchmark(Path(tmp))
        ports = {"nel": _free_port(), "ceiling": _free_port(), "peer": _free_port(),
                 "baseline": _free_port()}
        nel_cmd = [*_nel_serve_cmd(), "-b", str(byob), "--port", str(ports["nel"]),
                   "--workers", str(args.workers)]
        if args.scoring_workers:
            nel_cmd += ["--scoring-workers", str(args.scoring_workers)]
        ceiling_cmd = [sys.executable, str(Path(__file__).resolve()), "--ceiling-server",
                       "--port", str(ports["ceiling"]), "--workers", str(args.workers)]
        starts: dict[str, Any] = {
            "nel": lambda: _start(nel_cmd, ports["nel"]),
            "ceiling": lambda: _start(ceiling_cmd, ports["ceiling"], env={
                **os.environ, "PYTHONPATH": str(ROOT), "NEL_BENCH_BYOB": str(byob)}),
        }
        if args.baseline is not None:
            base = args.baseline.resolve()
            base_cmd = [*_nel_serve_cmd(), "-b", str(byob), "--port", str(ports["baseline"]),
                        "--workers", str(args.workers)]
            if args.scoring_workers:
                base_cmd += ["--scoring-workers", str(args.scoring_workers)]
            starts["baseline"] = lambda: _start(base_cmd, ports["baseline"], cwd=base, env={
                **os.environ, "PYTHONPATH": str(base)})
        if not args.no_peer:
            if not peer_bin.is_file():
                print(f"NeMo Evaluator 0.3.0 not found at {peer_bin} (make peers): --no-peer",
                      file=sys.stderr)
                return 2
            peer_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",
                                                                        "DAGSTER_HOME")}
            peer_env["HF_HUB_OFFLINE"] = "1"
            starts["peer"] = lambda: _start(
                [str(peer_bin), "serve", "-b", str(byob), "-p", str(ports["peer"]),
                 "--host", "127.0.0.1"], ports["peer"], cwd=Path(tmp), env=peer_env)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        rates: dict[str, list[float]] = {name: [] for name in starts}
        cpu: dict[str, list[float]] = {name: [] for name in starts}
        try:
            # All stay up (an idle server costs no CPU) and are driven in alternating
            # rounds, so a change in background load on a shared machine hits all alike.
            for name, start in starts.items():
                procs[name] = start()
            for _ in range(args.rounds):
                for name in starts:
                    cpu0, t0 = _tree_cpu(procs[name].pid), time.perf_counter()
                    rate = _measure(ports[name], SIZE, args)
                    # CPU over warm-up and rounds alike, per pair at the measured rate.
                    pairs = rate * (time.perf_counter() - t0)
                    cpu[name].append((_tree_cpu(procs[name].pid) - cpu0) / pairs * 1000)
                    rates[name].append(rate)
        finally:
            for proc in procs.values():
                _stop(proc)

    med = {name: statistics.median(r) for name, r in rates.items()}
    print(f"client={args.client} workers={args.workers} concurrency={args.concurrency} "
          f"rounds={args.rounds}x{args.duration}s cores={os.cpu_count()}")
    for name, r in rates.items():
        print(f"{name:8s}: median {med[name]:7.0f} pairs/s, "
              f"{statistics.median(cpu[name]):.3f} server CPU ms/pair; rounds {[round(x) for x in r]}")
    ratio = med["nel"] / med["ceiling"]
    ok = ratio >= args.target
    print(f"nel / ceiling (bare FastAPI route, same settings, same scoring): {ratio:.2f} "
          f"(target >= {args.target})")
    if "baseline" in med:
        print(f"nel / baseline ({args.baseline}): {med['nel'] / med['baseline']:.2f}")
    if "peer" in med:
        peer_ratio = med["nel"] / med["peer"]
        ok = ok and peer_ratio >= args.peer_target
        print(f"nel / NeMo Evaluator 0.3.0 serve: {peer_ratio:.2f} (target >= {args.peer_target})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
