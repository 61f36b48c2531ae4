"""Throughput of nel's client with and without the in-process interceptor chain.

Against the instant reference server, at concurrency 64, alternating rounds in one command:
`direct` (no chain) and `chain` (every cheap interceptor on: drop_params, system_message,
payload_modifier, modify_tools, turn_counter, reasoning, response_stats, log_tokens with its
logger quiet, progress_tracking without a webhook). Prints requests/s per round, the
medians and the ratio chain/direct.

    python bench/bench_interceptors.py --requests 4000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time

from nel_resources.config import ServiceConfig
from nel_resources.model_client import client_for_service
from nel_resources.reference_server import start_reference_server

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


async def _round(url: str, chain: bool, n: int, concurrency: int) -> tuple[float, float]:
    svc = ServiceConfig.model_validate({"type": "api", "url": url, "model": "tiny",
                                        "max_concurrent": concurrency,
                                        "interceptors": CHAIN if chain else []})
    async with client_for_service(svc) as client:
        body = client.encode([{"role": "user", "content": "What is 2+2?"}], None)
        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                await client.generate(body=body, repeat=0, session_id=str(i))
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=64)
    a = p.parse_args()
    logging.getLogger("nel.proxy").setLevel(logging.WARNING)
    logging.getLogger("nel.proxy").addHandler(logging.NullHandler())
    logging.getLogger("nel.proxy").propagate = False
    proc, url = start_reference_server()
    try:
        res: dict[str, list[float]] = {"direct": [], "chain": []}
        cpu: dict[str, list[float]] = {"direct": [], "chain": []}
        for r in range(a.rounds):
            order = ("direct", "chain") if r % 2 == 0 else ("chain", "direct")
            for mode in order:
                rps, us = asyncio.run(_round(url, mode == "chain", a.requests, a.concurrency))
                res[mode].append(rps)
                cpu[mode].append(us)
                print(f"round {r} {mode:6s} {rps:8.0f} req/s  client cpu {us:6.1f} us/req", flush=True)
        d, c = statistics.median(res["direct"]), statistics.median(res["chain"])
        dc, cc = statistics.median(cpu["direct"]), statistics.median(cpu["chain"])
        print(f"median direct {d:.0f} req/s, chain {c:.0f} req/s, ratio chain/direct {c / d:.3f}")
        # The client's own CPU per request: what the chain costs, whatever else the
        # machine is running (throughput on a shared 2-core machine moves with its load).
        print(f"client cpu per request: direct {dc:.1f} us, chain {cc:.1f} us "
              f"(chain adds {cc - dc:.1f} us, ratio direct/chain {dc / cc:.3f})")
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
