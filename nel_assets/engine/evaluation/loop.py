"""The evaluation loop: seed -> model -> verify for every (problem, repeat) of a shard.

A fixed pool of worker coroutines pulls work items from one iterator: no task per sample,
no per-sample validation, rows are plain dicts. Finished rows go to the journal; samples
already journaled (a resumed run) are never requested again.

There are more workers than request slots: the client holds a slot only while a request
is on the wire, so while some samples wait out a back-off (Retry-After, jitter) the other
workers keep every slot busy instead of the run idling.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from benchmarks import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.scoring import looks_like_refusal, split_reasoning
from nel_assets.engine.evaluation.journal import Journal
from nel_resources.model_client import AuthError, ChainStopError, ModelClient, ModelError
from nel_resources.sandboxes.base import SandboxError

RETRYABLE_FAILURES = frozenset({"timeout", "rate_limit", "error", "auth", "judge_error"})
# Workers per request slot: up to (this - 1) x slots samples can sit in a back-off while
# every slot still has a request on the wire.
WORKERS_PER_SLOT = 4


def needs_retry(row: dict[str, Any]) -> bool:
    """A sample whose request (or judge) failed: a rerun asks for it again.

    Scored failures (a wrong answer, a refusal, an empty reply that was received) carry no
    `error` and are final; retrying them would only re-roll the model.
    """
    return row.get("error") is not None or row.get("failure_category") in RETRYABLE_FAILURES


class JudgeError(Exception):
    """The judge could not grade a sample (request failed or reply unparseable)."""


class Judge(Protocol):
    """Grades a response after the benchmark's own verify (LLM-as-judge metrics).

    Implementations call the judge service through a ModelClient (same retries,
    concurrency and token accounting) and return the final verdict; everything the judge
    saw and said goes into `scoring_details["judge"]` so it lands in the trajectories.
    Raise JudgeError when the judge fails: the sample is then an error, never a 0.
    """

    async def grade(self, env: EvalEnvironment, seed: SeedResult, response: str,
                    reasoning: str | None, verdict: VerifyResult) -> VerifyResult: ...


@dataclass(slots=True)
class ShardSpec:
    """What one shard run covers and how its rows are labelled."""

    benchmark: str
    model: str  # partition key
    model_id: str
    shard: int
    indices: list[int]
    repeats: int = 1
    run_id: str = ""
    system_prompt: str | None = None
    protocol: str = "chat_completions"
    judge: Judge | None = None
    # The shard's sandboxes (`nel_assets.engine.evaluation.sandboxing.SandboxPool`) when the benchmark
    # has a sandbox block: verify then gets a started sandbox as `sandbox=`.
    sandboxes: Any = None
    # `detail` of the image parts sent with a seed's images (`solver.image_detail`).
    image_detail: str = "auto"
    # The dataset's content-addressed image folder: a seed's images are written there once
    # and rows name them by hash (None: not written, e.g. a solver called directly).
    image_dir: Any = None
    # An agentic solver (`nel_assets.engine.solvers.Solver`, e.g. tool_calling); None runs
    # the single request of the `simple` solver, on the loop's own fast path.
    solver: Any = None
    # The service's budget cap (`nel_assets.engine.evaluation.budget.Budget`), or None.
    budget: Any = None


def build_request(seed: SeedResult, protocol: str, system_prompt: str | None,
                  image_detail: str = "auto") -> tuple[list[dict[str, Any]] | None, str | None, str | None]:
    """(messages, prompt, system) for one seed; the user's system prompt always goes first.

    A seed's images go into the last user message as content parts with `image_detail`
    (`image_parts.attach_images`); a completions endpoint is refused for them.
    """
    system_parts = [s for s in (system_prompt, seed.system) if s]
    if seed.images:
        from nel_assets.engine.evaluation.image_parts import attach_images, seed_images

        if protocol == "completions":
            attach_images([], seed_images(seed.images), protocol, image_detail)  # raises
    if protocol == "completions":
        prompt = seed.prompt
        system = "\n\n".join(system_parts) or None
        if system:
            prompt = f"{system}\n\n{prompt}"
        return None, prompt, system
    messages = [dict(m) for m in seed.messages] if seed.messages else [
        {"role": "user", "content": seed.prompt}]
    if messages and messages[0].get("role") == "system":
        lead = str(messages.pop(0).get("content") or "")
        if lead not in system_parts:  # a seed may give its system prompt both ways
            system_parts.append(lead)
    system = "\n\n".join(p for p in system_parts if p) or None
    if system:
        messages.insert(0, {"role": "system", "content": system})
    if seed.images:
        messages = attach_images(messages, seed_images(seed.images), protocol, image_detail)
    return messages, None, system


_SeedEntry = tuple[SeedResult, float, str | None, str | None, str, str, str | None, str | None,
                   str | None]


def _category(meta: dict[str, Any]) -> str | None:
    c = meta.get("category")
    return None if c is None else str(c)


def _cluster(meta: dict[str, Any]) -> str | None:
    c = meta.get("cluster")
    return None if c is None else str(c)


async def run_shard(
    env: EvalEnvironment,
    client: ModelClient,
    spec: ShardSpec,
    *,
    journal: Journal | None = None,
    reuse: Iterable[dict[str, Any]] = (),
    concurrency: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    sink: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate one shard and return its rows (journaled rows included, in order).

    `on_row` sees each newly evaluated row as it completes (the Python API's progress).
    `sink`, when given, takes every row instead (kept ones first, then in completion order)
    and the returned list is empty: the caller stores rows as they come and the shard is
    never held as dicts (`nel_resources.storage.schema.TableBuilder`).

    Samples already in the journal, or given in `reuse` (the shard's stored rows), with a
    usable result are kept without a request; failed requests are asked again.
    """
    done: dict[str, dict[str, Any]] = {}
    for row in reuse:
        if not needs_retry(row):
            done[row["sample_id"]] = row
    if journal is not None:
        for row in Journal.replay(journal.path):
            if not needs_retry(row):
                done[row["sample_id"]] = row
        journal.start()
    rows: list[dict[str, Any]] = []
    keep = rows.append if sink is None else sink
    for row in done.values():
        keep(row)
    if on_progress and done:
        on_progress(len(done))

    # Per problem, shared by its repeats: (seed, seed_ms, prompt, system, messages JSON,
    # metadata JSON, category, cluster).
    seeds: dict[int, _SeedEntry] = {}
    seed_locks: dict[int, asyncio.Future[None]] = {}

    async def get_seed(idx: int) -> _SeedEntry:
        # Seed each problem once, shared by its repeats.
        cached = seeds.get(idx)
        if cached is not None:
            return cached
        fut = seed_locks.get(idx)
        if fut is not None:
            await fut
            return seeds[idx]
        fut = asyncio.get_running_loop().create_future()
        seed_locks[idx] = fut
        t0 = time.perf_counter()
        try:
            seed = await env.seed(idx)
            messages, prompt, system = build_request(seed, spec.protocol, spec.system_prompt,
                                                     spec.image_detail)
            kept, images_json = messages, None
            if seed.images:  # stored once per dataset; rows name the images by hash
                from nel_assets.engine.evaluation.image_parts import (
                    save_images,
                    seed_images,
                    stored_messages,
                )

                images = seed_images(seed.images)
                if spec.image_dir is not None:
                    save_images(spec.image_dir, images)
                kept = stored_messages(messages or [])
                images_json = orjson.dumps([i.ref for i in images]).decode()
            entry = (seed, (time.perf_counter() - t0) * 1000.0, prompt, system,
                     orjson.dumps(kept).decode() if kept is not None else orjson.dumps(
                         [{"role": "user", "content": prompt}]).decode(),
                     orjson.dumps(seed.metadata, default=str).decode(),
                     _category(seed.metadata), _cluster(seed.metadata), images_json)
            seeds[idx] = entry
            if spec.solver is None:  # a solver builds its own requests (and may have no client)
                bodies[idx] = client.encode(messages, prompt)
            return entry
        finally:
            fut.set_result(None)

    bodies: dict[int, bytes] = {}  # request body per problem, shared by its repeats

    def work() -> Iterator[tuple[int, int]]:
        for idx in spec.indices:
            for r in range(spec.repeats):
                if f"{idx}:{r}" not in done:
                    yield idx, r

    items = work()
    fatal: list[BaseException] = []
    budget = spec.budget
    not_sent: list[int] = []  # samples the budget cap kept from being sent

    async def one(idx: int, rep: int) -> dict[str, Any]:
        t_start = time.perf_counter()
        # A problem's later repeats find their seed cached: no coroutine for the lookup.
        seed, seed_ms, _prompt, system, messages_json, meta_json, category, cluster, images_json = (
            seeds.get(idx) or await get_seed(idx))
        sample_id = f"{idx}:{rep}"
        row: dict[str, Any] = {
            "run_id": spec.run_id, "benchmark": spec.benchmark, "model": spec.model,
            "model_id": spec.model_id, "shard": spec.shard, "problem_idx": idx, "repeat": rep,
            "sample_id": sample_id, "category": category,
            "cluster": cluster, "prompt": seed.prompt, "system": system,
            "messages": messages_json, "expected": seed.expected_answer, "metadata": meta_json,
            "seed_ms": seed_ms, "images": images_json,
        }
        if spec.solver is not None:
            return await solved(seed, row, t_start)
        t_model = time.perf_counter()
        try:
            resp = await client.generate(body=bodies[idx], repeat=rep, session_id=sample_id)
        except ModelError as exc:
            now = time.perf_counter()
            row.update(reward=None, error=str(exc)[:1000], failure_category=exc.category,
                       attempts=exc.attempts, model_ms=(now - t_model) * 1000.0,
                       verify_ms=0.0, total_ms=(now - t_start) * 1000.0, timestamp=time.time())
            return row
        model_ms = (time.perf_counter() - t_model) * 1000.0
        answer, reasoning = split_reasoning(resp.content, resp.reasoning_content)
        row.update(response=answer, reasoning=reasoning, finish_reason=resp.finish_reason,
                   prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens,
                   reasoning_tokens=resp.reasoning_tokens, attempts=resp.attempts, model_ms=model_ms)
        return await verified(seed, row, answer, reasoning, t_start)

    async def verified(seed: SeedResult, row: dict[str, Any], answer: str, reasoning: str | None,
                       t_start: float, sandbox: Any = None, state_answer: bool = False,
                       extra: dict[str, Any] | None = None) -> dict[str, Any]:
        # Verify (in the solver's sandbox when it had one), judge, and score the row.
        t_verify = time.perf_counter()
        try:
            if sandbox is not None:
                v = await env.verify(answer, seed.expected_answer, reasoning=reasoning,
                                     sandbox=sandbox, **seed.metadata)
            elif spec.sandboxes is not None:
                async with spec.sandboxes.sample(seed) as sbx:
                    v = await env.verify(answer, seed.expected_answer, reasoning=reasoning,
                                         sandbox=await sbx.verify_sandbox(), **seed.metadata)
            else:
                v = await env.verify(answer, seed.expected_answer, reasoning=reasoning, **seed.metadata)
            if spec.judge is not None:
                v = await spec.judge.grade(env, seed, answer, reasoning, v)
        except JudgeError as exc:
            row.update(reward=None, error=f"judge: {exc}"[:1000], failure_category="judge_error")
        except Exception as exc:  # a scorer bug must not kill the run: record it
            row.update(reward=None, error=f"verify failed: {type(exc).__name__}: {exc}"[:1000],
                       failure_category="error")
        else:
            reward = float(v.reward)
            details = v.scoring_details
            if v.metadata:
                details = {**details, "metadata": v.metadata}
            if extra:
                details = {**details, **extra}
            failure = None
            if state_answer:
                pass  # the answer is the sandbox's state: an empty patch is no empty reply
            elif not answer.strip() and not (reasoning or "").strip():
                failure = "empty_response"
                reward = 0.0  # an empty reply is never right
            elif reward <= 0.0:
                if looks_like_refusal(answer):
                    failure = "refusal"
                elif v.extracted_answer is None:
                    failure = "format_error"
            row.update(reward=reward, extracted=v.extracted_answer,
                       method=details.get("method"),
                       details=orjson.dumps(details, default=str).decode(),
                       failure_category=failure)
        now = time.perf_counter()
        row.update(verify_ms=(now - t_verify) * 1000.0, total_ms=(now - t_start) * 1000.0,
                   timestamp=time.time())
        return row

    async def solved(seed: SeedResult, row: dict[str, Any], t_start: float) -> dict[str, Any]:
        # An agentic solver: it works in the sample's sandbox, which verify then shares.
        from nel_assets.engine.solvers.base import SolveContext, SolveResult

        solver = spec.solver
        async with contextlib.AsyncExitStack() as stack:
            sandbox = None
            t_model = time.perf_counter()
            try:
                if spec.sandboxes is not None:
                    sbx = await stack.enter_async_context(spec.sandboxes.sample(seed))
                    sandbox = await sbx.solve_sandbox()
                res = await solver.solve(seed, SolveContext(row["sample_id"], row["problem_idx"],
                                                            row["repeat"], sandbox))
            except (AuthError, ChainStopError):
                raise
            except NelError as exc:
                if not isinstance(exc, SandboxError):
                    raise  # a config error (a tool name declared twice): stop the run
                res = SolveResult("", error=f"sandbox: {exc}"[:1000], failure_category="error")
            except Exception as exc:  # a solver bug must not kill the run: record it
                res = SolveResult("", error=f"solver failed: {type(exc).__name__}: {exc}"[:1000],
                                  failure_category="error")
            mr = res.model_response
            attempts = sum(int((s.get("metrics") or {}).get("extra", {}).get("attempts") or 1)
                           for s in res.steps if s.get("source") == "agent")
            row.update(finish_reason=mr.finish_reason if mr else None,
                       prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens,
                       attempts=attempts or 1, model_ms=(time.perf_counter() - t_model) * 1000.0,
                       turns=res.turns, tool_calls=int(res.scoring_details.get("tool_calls") or 0),
                       steps=orjson.dumps(res.steps, default=str).decode())
            if res.error is not None:
                now = time.perf_counter()
                row.update(reward=None, error=res.error[:1000],
                           failure_category=res.failure_category or "error", verify_ms=0.0,
                           total_ms=(now - t_start) * 1000.0, timestamp=time.time())
                return row
            answer, reasoning = split_reasoning(res.response, mr.reasoning_content if mr else None)
            row.update(response=answer, reasoning=reasoning)
            if res.reward is not None:  # the solver verified it itself: trusted
                now = time.perf_counter()
                row.update(reward=float(res.reward), failure_category=None, verify_ms=0.0,
                           method=res.scoring_details.get("method"),
                           details=orjson.dumps(res.scoring_details, default=str).decode(),
                           total_ms=(now - t_start) * 1000.0, timestamp=time.time())
                return row
            if sandbox is None and spec.sandboxes is not None:
                sandbox = await sbx.verify_sandbox()
            return await verified(seed, row, answer, reasoning, t_start, sandbox,
                                  bool(getattr(solver, "answer_is_sandbox_state", False)
                                       or getattr(env, "answer_is_sandbox_state", False)),
                                  res.scoring_details)
        raise AssertionError("unreachable")

    async def worker() -> None:
        for idx, rep in items:
            # A journal that cannot write (disk full) stops the run at once: every further
            # request would be answered and then lost.
            if fatal or (journal is not None and journal.error is not None):
                return
            try:
                if budget is None:
                    row = await one(idx, rep)
                else:
                    async with gate:  # checked, sent and counted within one slot (budget.py)
                        if budget.exhausted:
                            not_sent.append(1)
                            continue
                        row = await one(idx, rep)
                        budget.add(row)  # a failed request has no usage: it counts nothing
            except AuthError as exc:
                fatal.append(exc)
                return
            except Exception as exc:  # seeding failed: stop the shard, keep what is done
                fatal.append(exc)
                return
            keep(row)
            if journal is not None:
                journal.append(row)
            if on_progress is not None:
                on_progress(1)
            if on_row is not None:
                on_row(row)

    slots = max(1, concurrency or client.max_concurrent)
    gate = asyncio.Semaphore(slots)
    n_items = sum(1 for idx in spec.indices for r in range(spec.repeats) if f"{idx}:{r}" not in done)
    n_workers = max(1, min(slots * WORKERS_PER_SLOT, n_items))
    tasks = [asyncio.ensure_future(worker()) for _ in range(n_workers)]
    if journal is not None:
        # A journal that cannot write stops sending at once: workers waiting for a slot and
        # requests in flight are cancelled (their answers could not be kept anyway).
        journal.on_error = lambda: [t.cancel() for t in tasks]
    try:
        # The first worker to raise (Dagster's interrupt on Ctrl-C, say) ends the shard now,
        # not after the other workers have drained the queue.
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        for t in tasks:
            t.cancel()
        if journal is not None:
            journal.on_error = None
            await journal.close()
    if journal is not None:
        journal.raise_if_failed()
    if fatal:
        raise fatal[0]
    if not_sent:
        from nel_assets.engine.evaluation.budget import BudgetExhausted

        raise BudgetExhausted(budget.stop_message(len(not_sent)))
    rows.sort(key=lambda r: (r["problem_idx"], r["repeat"]))
    return rows
