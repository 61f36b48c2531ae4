"""`nel validate`: seed a benchmark's problems and check that gold answers score 1.0.

`--wrong` runs the other half of the gold self-consistency check: every item is answered
with another item's gold (stated the same way), skipping items whose golds are equivalent,
and must score 0. A scorer that passes the first check but not this one is too lenient.

With a model (`--model-url` and `--model-id`, or NEMO_MODEL_URL / NEMO_MODEL_ID, as NeMo
Evaluator 0.3.0's `validate`) the first `--samples` problems go to that endpoint instead and
each answer is scored: `K/N correct` and one PASS/FAIL line per problem. As there, that
check exits 0 once it has reported, whatever the model scored; a usage error exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
from collections.abc import AsyncIterator
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    """Add `validate`."""
    val = sub.add_parser("validate", help="check a benchmark: score gold answers, or a model's on a few samples",
                         description="Without a model: seed the problems and check that their gold "
                         "answers score 1.0 (exit 1 if not). With --model-url and --model-id (or "
                         "NEMO_MODEL_URL, NEMO_MODEL_ID): ask the model the first --samples problems "
                         "and report each answer's score (exit 0 once reported).")
    val.add_argument("-b", "--benchmark", "--bench", dest="bench", required=True, metavar="NAME",
                     help="registered name, a BYOB file (file.py or file.py:NAME), or gym://host:port")
    val.add_argument("-s", "--samples", type=int, default=5, help="problems to check (default 5; 0 = all)")
    val.add_argument("--model-url", default=os.environ.get("NEMO_MODEL_URL") or None,
                     help="model endpoint (or NEMO_MODEL_URL): ask it instead of checking gold answers")
    val.add_argument("--model-id", default=os.environ.get("NEMO_MODEL_ID") or None,
                     help="model name sent in requests (or NEMO_MODEL_ID)")
    val.add_argument("--api-key", default=os.environ.get("NEMO_API_KEY") or os.environ.get("NVIDIA_API_KEY") or None,
                     help="API key (default: NEMO_API_KEY, then NVIDIA_API_KEY)")
    val.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    val.add_argument("--import", dest="imports", action="append", default=[], metavar="FILE",
                     help="import a BYOB module or .py file first (its benchmarks register); repeatable")
    val.add_argument("--wrong", action="store_true",
                     help="answer each item with another item's gold: every score must be 0")
    val.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="benchmark parameter (YAML value), e.g. -p languages=[en,de]")
    val.add_argument("--json", action="store_true", help="print the result as JSON")
    val.add_argument("--show", action="store_true", help="print the seeded prompts")
    from dagster_project.cli.sandbox_flags import add_sandbox_flags

    add_sandbox_flags(val)
    val.set_defaults(func=_cmd_validate)


def _params(items: list[str]) -> dict[str, Any]:
    import yaml

    from benchmarks.errors import NelError

    out: dict[str, Any] = {}
    for it in items:
        if "=" not in it:
            raise NelError(f"--param {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = yaml.safe_load(v) if v.strip() else ""
    return out


def golds_equivalent(env: Any, a: Any, b: Any) -> bool:
    """Whether two seeds' golds are the same answer (the benchmark decides when it can)."""
    same = getattr(env, "golds_equivalent", None)
    if same is not None:
        return bool(same(a, b))
    return a.expected_answer.strip().lower() == b.expected_answer.strip().lower()


def wrong_partner(env: Any, seeds: list[Any], i: int, start: int) -> int | None:
    """The first item from `start` on (cyclically) whose gold is not equivalent to item i's."""
    n = len(seeds)
    for k in range(n):
        j = (start + k) % n
        if j != i and not golds_equivalent(env, seeds[i], seeds[j]):
            return j
    return None


async def check_gold(env: Any, n: int, *, wrong: bool = False, show: bool = False,
                     sandbox: Any = None) -> tuple[int, int, int, list[str]]:
    """Score gold (or shuffled wrong gold) responses on the first `n` items.

    `sandbox`, when given, opens one started sandbox per item (an async context manager)
    for a benchmark whose `verify` runs the answer's code.

    Returns:
        (passed, checked, skipped, failure lines).
    """
    seeds = [await env.seed(i) for i in range(n)]
    order = list(range(n))
    random.Random(1234).shuffle(order)
    ok, skipped, bad = 0, 0, []
    for i, s in enumerate(seeds):
        if show:
            print(f"--- {i}\n{s.prompt}\n=> {s.expected_answer}")
        if wrong:
            j = wrong_partner(env, seeds, i, order[i])
            if j is None:
                skipped += 1
                continue
            response = env.gold_response(seeds[j])
        else:
            response = env.gold_response(s)
        if sandbox is None:
            v = await env.verify(response, s.expected_answer, **s.metadata)
        else:
            async with sandbox() as sb:
                v = await env.verify(response, s.expected_answer, sandbox=sb, **s.metadata)
        passed = v.reward == 0.0 if wrong else v.reward >= 1.0
        if passed:
            ok += 1
        else:
            what = f"wrong gold {response[-80:]!r}" if wrong else f"gold {s.expected_answer[:80]!r}"
            bad.append(f"{i}: {what} scored {v.reward} ({v.scoring_details})"[:400])
    return ok, n - skipped, skipped, bad


@contextlib.asynccontextmanager
async def _sandboxes(args: argparse.Namespace, env: Any) -> AsyncIterator[Any]:
    """What opens one started sandbox per answer (None without `--sandbox`); a benchmark
    that runs model code without one, or a sandbox that cannot start, fails in one line."""
    from benchmarks.errors import NelError
    from dagster_project.cli.sandbox_flags import sandbox_config

    cfg = sandbox_config(args)
    if cfg is None or cfg.type == "none":
        if getattr(env, "needs_sandbox", False):
            raise NelError(f"benchmark {args.bench!r} runs model-written code and needs a sandbox: "
                           "add `--sandbox local` (or `--sandbox docker --sandbox-image IMAGE`)")
        yield None
        return
    from nel_assets.engine.evaluation.sandboxing import open_factory
    from nel_resources.sandboxes import SandboxError, SandboxSpec, running

    try:
        async with open_factory(cfg) as factory:
            # one sandbox up and down first: one that cannot start fails once, here
            async with running(factory.create(SandboxSpec())):
                pass
            yield lambda: running(factory.create(SandboxSpec()))
    except SandboxError as exc:
        raise NelError(f"--sandbox {cfg.type}: the sandbox cannot run: {exc}") from None


def _cmd_model(args: argparse.Namespace, env: Any) -> int:
    """NeMo Evaluator's `validate`: the first --samples problems asked of the model, scored."""
    import asyncio
    import json
    import logging

    from nel_assets.engine.evaluation.probe import probe
    from nel_resources.model_client import ModelClient

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    n = len(env) if args.samples == 0 else min(args.samples, len(env))
    client = ModelClient(args.model_url, model=args.model_id, api_key=args.api_key, max_retries=2)

    async def run() -> list[dict[str, Any]]:
        async with _sandboxes(args, env) as opener:
            return await probe(env, client, n, sandbox=opener)

    rows = asyncio.run(run())
    correct = sum(1 for r in rows if r["reward"] > 0)
    if args.json:
        print(json.dumps({"benchmark": args.bench, "model": args.model_id, "n": n,
                          "correct": correct, "results": rows}))
        return 0
    print(f"\n{correct}/{len(rows)} correct")
    for r in rows:
        mark = "PASS" if r["reward"] > 0 else "FAIL"
        why = f"  error: {r['error']}" if r["error"] else ""
        print(f"  [{mark}] p{r['problem_idx']}: expected={r['expected_answer']!r} "
              f"got={r['extracted_answer']!r} ({r['latency_ms']:.0f}ms {r['tokens']}tok){why}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from benchmarks import get_benchmark
    from benchmarks.errors import NelError
    from benchmarks.plugins import resolve_benchmark_ref
    from benchmarks.serve import import_plugins

    if args.samples < 0:
        raise NelError(f"--samples must be >= 0 (0 = all), got {args.samples}")
    if bool(args.model_url) != bool(args.model_id):
        missing = "--model-id (or NEMO_MODEL_ID)" if args.model_url else "--model-url (or NEMO_MODEL_URL)"
        raise NelError(f"a model check needs both --model-url and --model-id: give {missing}")
    import_plugins(args.imports)
    args.bench = resolve_benchmark_ref(args.bench)
    env = get_benchmark(args.bench, **_params(args.param))
    if args.model_url:
        return _cmd_model(args, env)
    if args.verbose:
        print("note: -v only changes the model check's logging", file=sys.stderr)
    if getattr(env, "requires_judge", False):
        msg = (f"{args.bench}: {len(env)} problems; graded by an LLM judge, so there is no "
               "gold self-consistency check (run it with a `type: judge` metric)")
        print(json.dumps({"benchmark": args.bench, "n": len(env), "skipped": "judge"})
              if args.json else msg)
        return 0
    n = len(env) if args.samples == 0 else min(args.samples, len(env))

    async def gold() -> tuple[int, int, int, list[str]]:
        async with _sandboxes(args, env) as opener:
            return await check_gold(env, n, wrong=args.wrong, show=args.show, sandbox=opener)

    ok, checked, skipped, bad = asyncio.run(gold())
    close = getattr(env, "close", None)
    if close is not None:
        asyncio.run(close())
    if args.json:
        print(json.dumps({"benchmark": args.bench, "n": len(env), "checked": checked,
                          "passed": ok, "skipped": skipped, "wrong": args.wrong,
                          "failures": bad[:20]}))
    elif args.wrong:
        print(f"{args.bench}: {len(env)} problems; another item's gold scored 0 on {ok}/{checked}"
              f" ({skipped} skipped: every other gold equivalent)")
    else:
        print(f"{args.bench}: {len(env)} problems; gold answers scored 1.0 on {ok}/{checked}")
    if not args.json:
        for line in bad[:20]:
            print("  " + line)
    return 0 if ok == checked else 1
