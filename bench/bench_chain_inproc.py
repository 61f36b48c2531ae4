"""What the in-process interceptor chain costs nel's client per request, without the wire.

`bench_interceptors.py` measures throughput against a real server; on a shared 2-core
machine its ratios move with the other load (a request's every added microsecond costs
more than one there: the client and server share cores and caches). This bench takes the
wire and the event loop out: `ModelClient.generate` runs with its `_post` (one HTTP
exchange with retries) replaced by an instant answer, so what is timed is the client's own
work per request: building the body, the chain's stages (the bench's chain: every cheap
interceptor on, log_tokens quiet), and turning the answer into a `ModelResponse`. `direct`
is the same client without a chain.

Each round runs in a fresh process (CPU time, best of 3 passes of `--requests` calls);
with `--baseline DIR` (another nel checkout) the rounds alternate between the two
checkouts, and the medians are printed side by side.

    python bench/bench_chain_inproc.py --requests 30000 --rounds 6 --baseline /work/main
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

# One round: (direct us/req, chain us/req), printed by a fresh process of a checkout.
_WORKER = r"""
import logging, sys, time
import orjson
log = logging.getLogger("nel.proxy")
log.setLevel(logging.WARNING); log.addHandler(logging.NullHandler()); log.propagate = False
from bench.bench_interceptors import _service
from nel_resources.proxy.service_client import client_for_service

ANSWER = orjson.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

async def post(data, subpath, headers):  # `_post`'s answer: status, parsed body, attempts, bytes
    return 200, orjson.loads(ANSWER), 1, ANSWER

n = int(sys.argv[1])
out = []
for chained in (False, True):
    client = client_for_service(_service("http://127.0.0.1:9/v1", chained, 64))
    client._pool = object()  # counts as open: generate never connects
    client._post = post
    body = client.encode([{"role": "user", "content": "What is 2+2?"}], None)
    best = float("inf")
    for rep in range(3):
        t = time.process_time()
        for i in range(n):
            # Nothing suspends (the answer is instant): one send runs the coroutine through.
            co = client.generate(body=body, repeat=0, session_id=str(i + rep * n))
            try:
                co.send(None)
            except StopIteration as done:
                resp = done.value
        best = min(best, (time.process_time() - t) / n * 1e6)
    assert resp.content == "4", resp
    out.append(best)
print(*out)
"""


def _round(checkout: Path, n: int) -> tuple[float, float]:
    """(direct, chain) client us/req of `checkout`'s code, in a new process."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", _WORKER, str(n)], cwd=checkout, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=30000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--baseline", metavar="DIR", help="another nel checkout, timed alongside")
    a = p.parse_args()
    here = Path(__file__).resolve().parent.parent
    checkouts = [here] + ([Path(a.baseline).resolve()] if a.baseline else [])
    res: dict[Path, list[tuple[float, float]]] = {c: [] for c in checkouts}
    for r in range(a.rounds):
        for c in checkouts if r % 2 == 0 else checkouts[::-1]:
            res[c].append(_round(c, a.requests))
    for c, rounds in res.items():
        d = statistics.median(x[0] for x in rounds)
        ch = statistics.median(x[1] for x in rounds)
        print(f"{c}: direct {d:.2f} us/req, chain {ch:.2f} us/req, chain adds {ch - d:.2f} us "
              f"(per round: {' '.join(f'{x[1] - x[0]:.2f}' for x in rounds)})")


if __name__ == "__main__":
    main()
