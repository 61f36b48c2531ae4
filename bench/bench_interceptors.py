"""Throughput of nel's client direct, through the in-process interceptor chain, and through
the standalone proxy process.

Against the instant reference server, at concurrency 64, alternating rounds in one command:
`direct` (no chain), `chain` (every cheap interceptor on in-process: drop_params,
system_message, payload_modifier, modify_tools, turn_counter, reasoning, response_stats,
log_tokens with its logger quiet, progress_tracking without a webhook) and `proxy` (the
same chain in a `nel proxy` process; the client sends to it without a chain). Prints
requests/s and the client's CPU per request for each round, the medians and the ratios to
direct; then the proxy's added latency: p50 of one request at a time through the proxy
minus direct, over `--latency-requests` requests, alternating rounds.

Each round also prints how the 2 cores were shared: the cores each process kept busy
over the round (its CPU seconds / the round's wall time: client, reference server,
proxy), so a round slowed by the machine's other load shows as the processes getting
less than their share.

The client runs on the loop a shard runs on (`--client-loop`, default uvloop, as
`nel eval run` since `nel_assets/engine/evaluation/interrupts.py` picks it; `asyncio` for asyncio's own).

`--native-reference` adds three more proxies in the same rounds, to show what any proxy
costs on this machine: `haproxy` (HAProxy, `--native-threads` threads, default 1) and
`nginx` (one worker process), two C proxies forwarding only, without interceptors
(`apt-get install haproxy nginx-light`), and `proxy-empty` (nel's proxy with no
interceptors). The C proxies are the floor of a proxy hop here: the loopback TCP work of two
more exchanges per request and a third busy process on 2 cores.

Cores: the client, the proxy and the reference server are three single-threaded processes
(the proxy under uvloop), not pinned; the OS shares
this machine's 2 cores between them and whatever else runs. In `direct` and `chain` two
busy processes share the 2 cores; in `proxy` three do, and every request costs the proxy
a whole HTTP exchange on each side (two reads, two writes: the kernel's loopback work
is charged to the sender) on top of the chain. So the proxy's figure is bounded by its
own CPU per request (printed) and by the three processes' CPU summed over 2 cores; on a
machine busy with other work the ratios move with the load, the CPU-per-request lines
less so.

    python bench/bench_interceptors.py --requests 3000 --rounds 4 [--baseline DIR]

`--baseline DIR` (a checkout of another nel, e.g. `git worktree add ../base main`) adds
`chain@base` and `proxy@base`: that checkout's chain in-process and its proxy process,
same server, same rounds. Then every mode's client
runs each round in a fresh process (the same worker code; `chain@base` in that
checkout), so no mode has a warmer process than another.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import yaml

from nel_assets.engine.evaluation.interrupts import loop_factory
from nel_resources.config import ServiceConfig
from nel_resources.proxy.server import start_proxy
from nel_resources.proxy.service_client import client_for_service
from nel_resources.reference_server import start_reference_server
from nel_resources.runtime.processes import ManagedProcess, free_port

CHAIN = [
    {"name": "drop_params", "config": {"params": ["junk"]}},
    {"name": "system_message", "config": {"system_message": "Be brief."}},
    {"name": "payload_modifier", "config": {"params_to_rename": {"old": "new"}}},
    {"name": "modify_tools", "config": {"strip_properties": ["x"]}},
    {"name": "turn_counter", "config": {"max_turns": 1000000}},
    {"name": "reasoning"},
    {"name": "response_stats", "config": {"every": 1000000}},
    {"name": "log_tokens"},
    {"name": "progress_tracking", "config": {"every": 1000000}},
]


def _service(url: str, chain: bool, concurrency: int) -> ServiceConfig:
    return ServiceConfig.model_validate({"type": "api", "url": url, "model": "tiny",
                                         "max_concurrent": concurrency,
                                         "interceptors": CHAIN if chain else []})


async def _round(url: str, chain: bool, n: int, concurrency: int) -> tuple[float, float]:
    async with client_for_service(_service(url, chain, concurrency)) as client:
        body = client.encode([{"role": "user", "content": "What is 2+2?"}], None)
        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                await client.generate(body=body, repeat=0, session_id=str(i))
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


async def _latency_p50(url: str, n: int) -> float:
    """Median milliseconds of one request at a time (nothing queued behind it)."""
    async with client_for_service(_service(url, False, 1)) as client:
        body = client.encode([{"role": "user", "content": "What is 2+2?"}], None)
        for _ in range(20):  # warm the connection
            await client.generate(body=body)
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            await client.generate(body=body)
            out.append((time.perf_counter() - t0) * 1000.0)
        return statistics.median(out)


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """`asyncio.run(coro)` on `loop` ("uvloop" or "asyncio"), as a shard would run it."""
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(coro)


# One round in a fresh process of a checkout: its `_round` with the proxy logger quiet, on
# the loop named in argv (this file's code, so a baseline checkout's client gets it too).
_WORKER = """
import asyncio, logging, sys
log = logging.getLogger("nel.proxy")
log.setLevel(logging.WARNING); log.addHandler(logging.NullHandler()); log.propagate = False
from bench.bench_interceptors import _round
factory = None
if sys.argv[5] == "uvloop":
    import uvloop
    factory = uvloop.new_event_loop
with asyncio.Runner(loop_factory=factory) as runner:
    rps, us = runner.run(_round(sys.argv[1], sys.argv[4] == "chain", int(sys.argv[2]),
                                int(sys.argv[3])))
print(rps, us)
"""


def _round_in(checkout: Path, url: str, n: int, concurrency: int, chain: bool, loop: str
              ) -> tuple[float, float]:
    """A round run by `checkout`'s code in a new process: (req/s, client us/req)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", _WORKER, url, str(n), str(concurrency),
                          "chain" if chain else "plain", loop],
                         cwd=checkout, env=env, capture_output=True, text=True, check=True)
    rps, us = out.stdout.split()[-2:]
    return float(rps), float(us)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_proxy(url: str, tmp: Path, checkout: Path | None = None,
                 chain: list[dict[str, Any]] | None = None) -> tuple[object, str]:
    """The proxy with the bench's chain (or `chain`); `checkout`: that nel's proxy code
    instead of ours."""
    cfg = tmp / "proxy.yaml"
    cfg.write_text(yaml.safe_dump({
        "services": {"m": {"type": "api", "url": url, "model": "tiny", "max_concurrent": 64,
                           "interceptors": CHAIN if chain is None else chain}},
        "benchmarks": [{"name": "gsm8k"}]}))
    if checkout is None:
        return start_proxy(cfg, "m", log_level="WARNING")  # log_tokens quiet, as in-process
    # `python -m` puts the child's working directory first on its path: started from the
    # other checkout (and with it on PYTHONPATH), the child runs that checkout's proxy.
    cwd = os.getcwd()
    os.chdir(checkout)
    try:
        return start_proxy(cfg, "m", log_level="WARNING", env={"PYTHONPATH": str(checkout)})
    finally:
        os.chdir(cwd)


def _native_config(kind: str, port: int, upstream: str, tmp: Path, threads: int) -> str:
    """The config of a native forwarding proxy (`kind`: haproxy or nginx) listening on
    127.0.0.1:`port`: `threads` threads (HAProxy; nginx has one process), keep-alive both
    ways, upstream connections reused, no logging."""
    if kind == "haproxy":
        return f"""global
  nbthread {threads}
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend nel_bench
  bind 127.0.0.1:{port}
  default_backend upstream
backend upstream
  server s1 {upstream}
"""
    return f"""daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log error;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  upstream up {{ server {upstream}; keepalive 128; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 1000000;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""


def _start_native(kind: str, upstream: str, tmp: Path, threads: int) -> tuple[object, str]:
    """HAProxy or nginx (`_native_config`) forwarding to `upstream` (host:port) on a free port
    of 127.0.0.1, started once it answers `/health` through to the reference server: the
    process (its one process serves, so its CPU is the proxy's) and its base URL."""
    exe = shutil.which(kind)
    if exe is None:
        sys.exit(f"--native-reference needs {kind}: apt-get install "
                 f"{'haproxy' if kind == 'haproxy' else 'nginx-light'}")
    port = free_port()
    cfg = tmp / f"{kind}.conf"
    cfg.write_text(_native_config(kind, port, upstream, tmp, threads))
    # nginx without its master process: the one process serving is the one started
    argv = ([exe, "-f", str(cfg), "-db"] if kind == "haproxy"
            else [exe, "-c", str(cfg), "-p", str(tmp), "-g", "master_process off;"])
    proc = ManagedProcess(argv, name=kind, log_path=tmp / f"{kind}.log").start()
    try:
        proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout=10)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{port}/v1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency-requests", type=int, default=500)
    p.add_argument("--baseline", metavar="DIR",
                   help="another nel checkout: adds chain@base and proxy@base")
    p.add_argument("--client-loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="the client's event loop (default: uvloop, the loop shards run on)")
    p.add_argument("--native-reference", action="store_true",
                   help="add haproxy and nginx (C proxies, no interceptors) and proxy-empty "
                        "(nel's proxy without interceptors)")
    p.add_argument("--native-threads", type=int, default=1,
                   help="HAProxy's threads with --native-reference (default 1; nginx runs as "
                        "one process)")
    return p


def _start_proxies(a: argparse.Namespace, url: str, base: Path | None,
                   proxies: dict[str, tuple[object, str]]) -> None:
    """Start nel's proxy (and, as asked, the native references and the baseline's proxy)
    into `proxies` (filled as they start, so the caller stops whatever did start)."""
    proxies["proxy"] = _start_proxy(url, Path(tempfile.mkdtemp(prefix="nel-bench-proxy-")))
    if a.native_reference:
        upstream = url.split("//", 1)[1].split("/", 1)[0]
        for kind in ("haproxy", "nginx"):
            proxies[kind] = _start_native(kind, upstream,
                                          Path(tempfile.mkdtemp(prefix=f"nel-bench-{kind}-")),
                                          a.native_threads)
        proxies["proxy-empty"] = _start_proxy(
            url, Path(tempfile.mkdtemp(prefix="nel-bench-proxy-")), chain=[])
    if base is not None:
        proxies["proxy@base"] = _start_proxy(
            url, Path(tempfile.mkdtemp(prefix="nel-bench-proxy-")), base)


def _throughput(a: argparse.Namespace, url: str, server_pid: int, here: Path, base: Path | None,
                proxies: dict[str, tuple[object, str]]
                ) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """Alternating rounds of every mode: req/s, client CPU us/req, proxy CPU us/req."""
    modes: tuple[str, ...] = ("direct", "chain", "proxy") + (
        ("haproxy", "nginx", "proxy-empty") if a.native_reference else ()) + (
        ("chain@base", "proxy@base") if base else ())
    res: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    proxy_cpu: dict[str, list[float]] = {m: [] for m in proxies}
    for r in range(a.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        for mode in order:
            # (a mode without a proxy reads ours, idle, and prints no proxy share)
            this_proxy, target = proxies.get(mode, (proxies["proxy"][0], url))
            p0 = _cpu_seconds(this_proxy.pid)  # type: ignore[attr-defined]
            s0 = _cpu_seconds(server_pid)
            chained = mode.startswith("chain")
            if base is not None:
                # The client of `proxy@base` is ours, as for `proxy`: only the proxy differs.
                rps, us = _round_in(base if mode == "chain@base" else here, target,
                                    a.requests, a.concurrency, chained, a.client_loop)
            else:
                rps, us = run_on(a.client_loop,
                                 _round(target, chained, a.requests, a.concurrency))
            wall = a.requests / rps
            proxy_s = _cpu_seconds(this_proxy.pid) - p0  # type: ignore[attr-defined]
            server_s = _cpu_seconds(server_pid) - s0
            if mode in proxies:
                proxy_cpu[mode].append(proxy_s / a.requests * 1e6)
            res[mode].append(rps)
            cpu[mode].append(us)
            cores = (f"cores: client {us * a.requests / 1e6 / wall:.2f}, "
                     f"server {server_s / wall:.2f}"
                     + (f", proxy {proxy_s / wall:.2f}" if mode in proxies else ""))
            print(f"round {r} {mode:10s} {rps:8.0f} req/s  client cpu {us:6.1f} us/req  "
                  f"{cores}", flush=True)
    return res, cpu, proxy_cpu


def _report(res: dict[str, list[float]], cpu: dict[str, list[float]],
            proxy_cpu: dict[str, list[float]], base: Path | None, client_loop: str) -> None:
    """Print the medians and the ratios of the throughput rounds."""
    d, c, x = (statistics.median(res[m]) for m in ("direct", "chain", "proxy"))
    dc, cc = statistics.median(cpu["direct"]), statistics.median(cpu["chain"])
    print(f"median direct {d:.0f} req/s, chain {c:.0f} req/s, proxy {x:.0f} req/s; "
          f"ratio chain/direct {c / d:.3f}, proxy/direct {x / d:.3f}")
    # The client's own CPU per request: what the chain costs, whatever else the
    # machine is running (throughput on a shared 2-core machine moves with its load).
    print(f"client cpu per request: direct {dc:.1f} us, chain {cc:.1f} us "
          f"(chain adds {cc - dc:.1f} us, ratio direct/chain {dc / cc:.3f})")
    if base is not None:
        cb, cbc = statistics.median(res["chain@base"]), statistics.median(cpu["chain@base"])
        print(f"baseline {base}: chain@base {cb:.0f} req/s (ratio to direct {cb / d:.3f}), "
              f"client cpu {cbc:.1f} us/req; this chain / chain@base {c / cb:.3f}")
        xb = statistics.median(res["proxy@base"])
        print(f"baseline {base}: proxy@base {xb:.0f} req/s (ratio to direct {xb / d:.3f}), "
              f"process cpu {statistics.median(proxy_cpu['proxy@base']):.1f} us/req; "
              f"this proxy / proxy@base {x / xb:.3f}")
    print(f"proxy process cpu per request: {statistics.median(proxy_cpu['proxy']):.1f} us "
          "(its own core time; the client's above is extra)")
    for ref in ("haproxy", "nginx", "proxy-empty"):
        if ref in res:
            xr = statistics.median(res[ref])
            print(f"reference {ref}: {xr:.0f} req/s (ratio to direct {xr / d:.3f}), "
                  f"process cpu {statistics.median(proxy_cpu[ref]):.1f} us/req, "
                  f"client cpu {statistics.median(cpu[ref]):.1f} us/req")
    print(f"client loop: {client_loop}")


def _latency(a: argparse.Namespace, url: str, proxies: dict[str, tuple[object, str]]) -> None:
    """p50 latency one request at a time, direct and through each proxy (alternating)."""
    lat: dict[str, list[float]] = {"direct": [], **{m: [] for m in proxies}}
    for r in range(a.rounds):
        for mode in (list(lat) if r % 2 == 0 else list(lat)[::-1]):
            target = proxies[mode][1] if mode in proxies else url
            lat[mode].append(run_on(a.client_loop, _latency_p50(target, a.latency_requests)))
    ld = statistics.median(lat["direct"])
    for mode in proxies:
        lp = statistics.median(lat[mode])
        print(f"latency p50 one at a time: direct {ld:.3f} ms, {mode} {lp:.3f} ms, "
              f"{mode} adds {lp - ld:.3f} ms")


def main() -> None:
    a = _parser().parse_args()
    here = Path(__file__).resolve().parent.parent
    base = Path(a.baseline).resolve() if a.baseline else None
    logging.getLogger("nel.proxy").setLevel(logging.WARNING)
    logging.getLogger("nel.proxy").addHandler(logging.NullHandler())
    logging.getLogger("nel.proxy").propagate = False
    proc, url = start_reference_server()
    proxies: dict[str, tuple[object, str]] = {}
    try:
        _start_proxies(a, url, base, proxies)
        res, cpu, proxy_cpu = _throughput(a, url, proc.pid, here, base, proxies)
        _report(res, cpu, proxy_cpu, base, a.client_loop)
        _latency(a, url, proxies)
    finally:
        for running, _ in proxies.values():
            running.stop()  # type: ignore[attr-defined]
        proc.stop()


if __name__ == "__main__":
    main()
