"""Where the compiled in-process chain's cost goes around the real wire: each stage's share.

`bench_chain_inproc.py` times the chain's stages without the wire (a tight loop); this
bench runs nel's client against the instant reference server at concurrency 64, as
`bench_interceptors.py` does, with the bench's chain compiled and one stage at a time
replaced, so the difference to `chain` is what that stage costs there:

- `direct`: no chain;
- `chain`: the bench's chain (`CHAIN` in bench_interceptors.py), compiled;
- `stubs`: both compiled stages replaced by no-ops (the request stage returns the bytes
  the real one makes of the body, so the server gets the same request): what having a
  chain costs the client besides the stages' own work;
- `no_request` / `no_response`: only that stage replaced;
- `request_x2` / `response_x2`: that stage run twice per request (the second request
  stage under another session, so both count a new session): its marginal cost.

The client runs on the loop a shard runs on (`--client-loop`, default uvloop).
All modes run in one process against one server, in alternating order per round; the
client's CPU per request (its process time over the round) is printed as the median over
rounds, with the throughput and the server's CPU per request. On a shared 2-core machine
the throughput moves with the other load; the client's CPU per request less so.

    python bench/bench_chain_stages.py --requests 20000 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import statistics
import time
from typing import Any

from bench.bench_interceptors import _cpu_seconds, _service, run_on
from nel_resources.proxy.service_client import client_for_service
from nel_resources.reference_server import start_reference_server

MODES = ("direct", "chain", "stubs", "no_request", "no_response", "request_x2", "response_x2")


def _replace_stages(client: Any, mode: str, body: bytes) -> None:
    """The client's compiled chain with the stages `mode` names replaced."""
    assert client.chain is not None and client._runs_inline(client.chain)
    cc = client._compiled_chain
    assert cc is not None, "the bench's chain compiles"
    request, response = cc.request, cc.response
    sent = request(body, "bench-stages")  # what the real stage sends for this body
    if mode in ("stubs", "no_request"):
        cc = dataclasses.replace(cc, request=lambda raw, session_id: sent)
    if mode in ("stubs", "no_response"):
        cc = dataclasses.replace(cc, response=lambda status, obj, latency_ms: None)
    if mode == "request_x2":
        def twice(raw: bytes, session_id: str | None) -> bytes:
            request(raw, f"{session_id}/2")
            return request(raw, session_id)
        cc = dataclasses.replace(cc, request=twice)
    if mode == "response_x2":
        def both(status: int, obj: Any, latency_ms: float) -> None:
            response(status, obj, latency_ms)
            response(status, obj, latency_ms)
        cc = dataclasses.replace(cc, response=both)
    client._compiled_chain = cc


async def _round(url: str, mode: str, n: int) -> tuple[float, float]:
    """(requests/s, client CPU us per request) of one round of `mode`."""
    async with client_for_service(_service(url, mode != "direct", 64)) as client:
        body = client.encode([{"role": "user", "content": "What is 2+2?"}], None)
        if mode != "direct":
            _replace_stages(client, mode, body)
        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                await client.generate(body=body, repeat=0, session_id=str(i))
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(64)))
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--client-loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="the client's event loop (default: uvloop, the loop shards run on)")
    a = p.parse_args()
    modes = a.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown modes {unknown}: use {', '.join(MODES)}")
    log = logging.getLogger("nel.proxy")  # log_tokens quiet, as in bench_interceptors
    log.setLevel(logging.WARNING)
    log.addHandler(logging.NullHandler())
    log.propagate = False
    proc, url = start_reference_server()
    res: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    try:
        for m in modes:  # warm: imports, the server's first answers
            run_on(a.client_loop, _round(url, m, 1000))
        for r in range(a.rounds):
            for m in modes if r % 2 == 0 else modes[::-1]:
                s0 = _cpu_seconds(proc.pid)  # type: ignore[attr-defined]
                rps, us = run_on(a.client_loop, _round(url, m, a.requests))
                server = (_cpu_seconds(proc.pid) - s0) / a.requests * 1e6  # type: ignore[attr-defined]
                res[m].append((rps, us, server))
    finally:
        proc.stop()  # type: ignore[attr-defined]
    med = {m: [statistics.median(x[i] for x in rows) for i in range(3)] for m, rows in res.items()}
    first = modes[0]
    for m in modes:
        rps, us, server = med[m]
        print(f"{m:12s} {rps:8.0f} req/s (x{rps / med[first][0]:.3f} of {first})  "
              f"client cpu {us:5.1f} us/req ({us - med[first][1]:+.1f} vs {first})  "
              f"server cpu {server:5.1f} us/req")


if __name__ == "__main__":
    main()
