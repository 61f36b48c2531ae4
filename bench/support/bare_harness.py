"""The harness-style yardstick of `bench_eval_throughput.py`: a bare aiohttp evaluation loop
as a process of its own, doing what an evaluation harness must do and nothing more.

It starts a fresh interpreter, reads GSM8K's original `test.jsonl`, formats each problem with
nel's default prompt, sends every sample once (at `--concurrency` workers over one session),
extracts the last number of each answer, compares it with the reference answer, writes one
JSON row per sample to `--out` and prints the accuracy. Its wall time, from spawn to exit, is
what issue 32's "bare aiohttp loop run as a separate process that also scores and writes its
rows" names: no statistics, no exports, no resume, no recording.

    python bench/support/bare_harness.py --data ../shared/datasets/gsm8k/test.jsonl \
        --url http://127.0.0.1:PORT/v1 --repeats 8 --out /tmp/rows.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import re

import aiohttp
import orjson

PROMPT = ("Solve the following math problem step by step. Put your final numerical answer after "
          "'The answer is'.\n\nProblem: {question}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in `text`, without thousands separators (None when there is none)."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


async def run(url: str, items: list[tuple[str, str]], repeats: int, concurrency: int,
              out_path: str) -> float:
    """Evaluate every item `repeats` times; writes the rows, returns the accuracy."""
    jobs = iter([(r, i) for r in range(repeats) for i in range(len(items))])
    rows: list[bytes] = []
    correct = 0
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        async def worker() -> None:
            nonlocal correct
            for repeat, idx in jobs:
                prompt, expected = items[idx]
                body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]})
                async with session.post(url + "/chat/completions", data=body,
                                        headers={"Content-Type": "application/json"}) as resp:
                    answer = orjson.loads(await resp.read())["choices"][0]["message"]["content"]
                got = last_number(answer)
                ok = got is not None and float(got) == float(expected)
                correct += ok
                rows.append(orjson.dumps({"idx": idx, "repeat": repeat, "prompt": prompt,
                                          "response": answer, "extracted": got,
                                          "expected": expected, "correct": ok}))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    with open(out_path, "wb") as out:
        out.write(b"\n".join(rows) + b"\n")
    return correct / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="GSM8K's test.jsonl")
    ap.add_argument("--url", required=True, help="the OpenAI-compatible base URL (…/v1)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--out", required=True, help="where the JSONL rows go")
    a = ap.parse_args()
    items = []
    with open(a.data, "rb") as f:
        for line in f:
            row = orjson.loads(line)
            items.append((PROMPT.format(question=row["question"]),
                          row["answer"].rsplit("####", 1)[1].strip().replace(",", "")))
    print(f"accuracy {asyncio.run(run(a.url, items, a.repeats, a.concurrency, a.out)):.4f}")


if __name__ == "__main__":
    main()
