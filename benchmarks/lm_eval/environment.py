"""`lm-eval://TASK`: an lm-evaluation-harness task (or group) as a nel benchmark.

lm-eval does the benchmark's own work: its YAML task definitions, prompts
(`doc_to_text`/`doc_to_target`/`doc_to_choice`, few-shot contexts with its seeded sampler),
filters and metrics. nel does the rest: the requests (through its client, shards, journal,
retries), storage and statistics. One nel problem is one lm-eval document; its requests
are lm-eval's `Instance`s for that document, built once, in lm-eval's order (the few-shot
sampler draws from one seeded stream per task, so the order decides the contexts).

`generate_until` documents go through the solver's generation request and `verify`;
the log-likelihood kinds (`multiple_choice`, `loglikelihood`, `loglikelihood_rolling`)
through `score`, with the log-likelihoods the solver measured.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._types import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.lm_eval.local_data import default_data_dir

#: lm-eval's default few-shot seed (`--fewshot_random_seed`), so contexts match its runs.
FEWSHOT_SEED = 1234
#: What lm-eval's API models send for a generation when the task does not say (max_gen_toks).
DEFAULT_MAX_GEN_TOKS = 256


@dataclass(slots=True)
class _Doc:
    task_name: str
    doc_id: int
    instances: list[Any]


class LmEvalEnvironment(EvalEnvironment):
    """An lm-eval task, group or tag, run by nel's engine.

    Args:
        task: The lm-eval task (or group/tag) name, or a task YAML path.
        data_dir: Where the tasks' datasets are, laid out like their Hub ids (see
            `benchmarks.lm_eval.local_data`); default `default_data_dir()`.
        include_path: A folder of extra task YAMLs (lm-eval's `--include_path`).
        num_fewshot: Overrides the tasks' few-shot count (lm-eval's `--num_fewshot`).
        protocol: `completions` (prompts as text) or a chat protocol (the contexts as chat
            messages, as lm-eval's `--apply_chat_template` builds them).
        fewshot_as_multiturn: Few-shot examples as separate chat turns (chat only).
        rolling_prefix: Text a `loglikelihood_rolling` document is scored after (not itself
            scored), so its first token is scored too. lm-eval sends its tokenizer's
            decoding of `[prefix_token_id] + tokens`: `"<s> "` before the text for a
            llama/SentencePiece tokenizer, `"<|endoftext|>"` for GPT-2's. Empty: the first
            token is not scored (a text prompt cannot name a special token portably).
        max_length: lm-eval's `max_length` model argument: documents are cut into its token
            windows by the server's tokenizer, as lm-eval cuts them (llama-cpp-python's
            server). None: a document is sent whole (character windows if it is too long).
    """

    version = "1"

    def __init__(self, task: str, *, data_dir: str | None = None,
                 include_path: str | None = None, num_fewshot: int | None = None,
                 protocol: str = "completions", fewshot_as_multiturn: bool = False,
                 rolling_prefix: str = "", max_length: int | None = None) -> None:
        super().__init__()
        from benchmarks.lm_eval.tasks import load_tasks

        self.task = task
        self.name = f"lm-eval://{task}"
        self.data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
        self.chat = protocol != "completions"
        self.num_fewshot = num_fewshot
        self.rolling_prefix = rolling_prefix
        if max_length is not None and int(max_length) < 3:
            raise NelError(f"lm-eval://{task}: params.max_length must be at least 3 "
                           f"(got {max_length})")
        self.max_length = None if max_length is None else int(max_length)
        self.fewshot_as_multiturn = fewshot_as_multiturn and self.chat
        self.tasks = load_tasks(task, self.data_dir, include_path)
        self.docs: list[_Doc] = []
        for name, t in self.tasks.items():
            self._configure(t)
            t.build_all_requests(apply_chat_template=self.chat,
                                 fewshot_as_multiturn=self.fewshot_as_multiturn,
                                 chat_template=_json_chat if self.chat else None)
            by_doc: dict[int, list[Any]] = {}
            for inst in t.instances:
                by_doc.setdefault(int(inst.doc_id), []).append(inst)
            self.docs.extend(_Doc(name, d, sorted(v, key=lambda i: i.idx))
                             for d, v in sorted(by_doc.items()))
        if not self.docs:
            raise NelError(f"lm-eval task {task!r} has no documents in its local data")
        self._positions = {(d.task_name, d.doc_id): i for i, d in enumerate(self.docs)}
        self._data_hash = self._hash_data()

    def _configure(self, t: Any) -> None:
        # As lm-eval's evaluator does before building requests (simple_evaluate).
        if self.num_fewshot is not None and t.get_config("num_fewshot") != 0:
            t.set_config(key="num_fewshot", value=self.num_fewshot)
        elif t.get_config("num_fewshot") is None:
            t.set_config(key="num_fewshot", value=0)
        t.set_fewshot_seed(seed=FEWSHOT_SEED)

    def _hash_data(self) -> str:
        h = hashlib.sha256()
        for d in self.docs:
            h.update(json.dumps(d.instances[0].doc, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.docs)

    def fingerprint(self) -> str:
        """lm-eval's version and every task's resolved config: a changed YAML re-runs."""
        from importlib.metadata import version

        h = hashlib.sha256()
        for name, t in self.tasks.items():
            h.update(name.encode())
            h.update(json.dumps(t.dump_config(), sort_keys=True, default=str).encode())
        # Only a set prefix enters the fingerprint: runs made without one stay up to date.
        prefix = f"prefix={self.rolling_prefix!r}:" if self.rolling_prefix else ""
        if self.max_length is not None:
            prefix += f"max_length={self.max_length}:"
        return (f"{super().fingerprint()}:lm_eval={version('lm_eval')}:chat={self.chat}:"
                f"multiturn={self.fewshot_as_multiturn}:{prefix}{h.hexdigest()[:16]}")

    def kind(self, idx: int) -> str:
        """The lm-eval output type of problem `idx`."""
        return str(self.tasks[self.docs[idx].task_name].OUTPUT_TYPE)

    async def seed(self, idx: int) -> SeedResult:
        d = self.docs[idx]
        t = self.tasks[d.task_name]
        first = d.instances[0]
        kind = str(t.OUTPUT_TYPE)
        meta: dict[str, Any] = {"category": d.task_name, "doc_id": d.doc_id, "lm_eval_kind": kind}
        target = t.doc_to_target(first.doc)
        expected = str(target if not isinstance(target, int) or kind != "multiple_choice"
                       else t.doc_to_choice(first.doc)[target])
        if kind == "generate_until":
            ctx, gen_kwargs = first.args[0], first.args[1]
            meta["gen_kwargs"] = dict(gen_kwargs)
            if self.chat:
                messages = json.loads(str(ctx))
                prompt = str(messages[-1].get("content", "")) if messages else ""
                return SeedResult(prompt=prompt, expected_answer=expected, metadata=meta,
                                  messages=messages)
            return SeedResult(prompt=str(ctx), expected_answer=expected, metadata=meta)
        # Log-likelihood kinds: the (context, continuation) pairs, or the text to score.
        meta["requests"] = [list(i.args) for i in d.instances]
        prompt = str(first.args[0])
        return SeedResult(prompt=prompt, expected_answer=expected, metadata=meta)

    def request_fields(self, gen_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The generation fields lm-eval's `local-completions` / `local-chat-completions`
        send for a task's `generation_kwargs` (its `_create_payload`), so nel asks the same."""
        g = dict(gen_kwargs)
        g.pop("do_sample", None)
        max_tokens = g.pop("max_tokens") if "max_tokens" in g else g.pop(
            "max_gen_toks", DEFAULT_MAX_GEN_TOKS)
        until = g.pop("until", None)
        stop = [until] if isinstance(until, str) else list(until or [])
        return {"max_tokens": max_tokens, "temperature": g.pop("temperature", 0),
                "stop": stop[:4] if self.chat else stop, "seed": FEWSHOT_SEED, **g}

    async def verify(self, response: str, expected: str, **metadata: Any) -> VerifyResult:
        """Scores a `generate_until` answer with the task's filters and metrics."""
        from lm_eval.models.utils import postprocess_generated_text

        idx = self.index_of(metadata)
        until = (metadata.get("gen_kwargs") or {}).get("until")
        text = postprocess_generated_text(response, until, None)
        return self.score(idx, [text])

    def index_of(self, metadata: dict[str, Any]) -> int:
        """The problem index of a seed's metadata (its task and lm-eval document id)."""
        key = (metadata.get("category"), metadata.get("doc_id"))
        idx = self._positions.get(key)  # type: ignore[arg-type]
        if idx is None:
            raise NelError(f"no lm-eval document {key[0]}/{key[1]} in {self.name}")
        return idx

    def score(self, idx: int, responses: list[Any]) -> VerifyResult:
        """lm-eval's verdict on document `idx` from one response per request (a generation,
        a `(loglikelihood, is_greedy)` pair, or a rolling log-likelihood): its filters, then
        `process_results`, per filter. The reward is the task's first metric under its first
        filter (bits per byte for perplexity tasks), each metric reduced by its own
        aggregation over this one document."""
        from lm_eval.api.instance import Instance

        d = self.docs[idx]
        t = self.tasks[d.task_name]
        insts = [Instance(request_type=i.request_type, doc=i.doc, arguments=i.arguments,
                          idx=i.idx, metadata=(d.task_name, d.doc_id, 1)) for i in d.instances]
        if len(responses) != len(insts):
            raise NelError(f"{self.name} document {idx}: {len(responses)} responses for "
                           f"{len(insts)} requests")
        for inst, r in zip(insts, responses, strict=True):
            inst.resps = [r]
        for ensemble in t._filters:  # lm-eval's filter pipelines (Task.apply_filters)
            ensemble.apply(insts)
        agg = t.aggregation()
        metrics: dict[str, Any] = {}
        per_item: dict[str, float] = {}
        for key in insts[0].filtered_resps:
            values = t.process_results(insts[0].doc, [i.filtered_resps[key] for i in insts])
            for m, v in values.items():
                metrics[f"{m},{key}"] = v
                per_item[f"{m},{key}"] = _one(agg.get(m), v)
        primary = _primary(t, per_item)
        reward = per_item[primary]
        extracted = _extracted(t, insts, next(iter(insts[0].filtered_resps)))
        return VerifyResult(reward=reward, extracted_answer=extracted, scoring_details={
            "method": f"lm-eval {primary}", "metrics": per_item,
            "raw": {k: v for k, v in metrics.items() if isinstance(v, list | tuple)}})


def _json_chat(history: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """lm-eval's chat template for API chat models: the messages themselves, as JSON."""
    return json.dumps(history, ensure_ascii=False)


def _one(aggregate: Any, value: Any) -> float:
    """A metric's value on one document: its aggregation over a one-element list."""
    if isinstance(value, bool | int | float):
        return float(value)
    if aggregate is None:
        raise NelError(f"lm-eval metric value {value!r} has no aggregation")
    out = float(aggregate([value]))
    return out if math.isfinite(out) else float("nan")


def _primary(task: Any, per_item: dict[str, float]) -> str:
    names = [m["metric"] for m in (task.config.metric_list or []) if "metric" in m] or [
        k.split(",")[0] for k in per_item]
    if task.OUTPUT_TYPE == "loglikelihood_rolling" and "bits_per_byte" in names:
        names = ["bits_per_byte"]
    for n in names:
        for k in per_item:
            if k.split(",")[0] == n:
                return k
    return next(iter(per_item))


def _extracted(task: Any, insts: list[Any], key: str) -> str | None:
    """What the model answered, for the results table: the filtered generation, or the
    choice with the highest log-likelihood."""
    first = insts[0].filtered_resps[key]
    if task.OUTPUT_TYPE == "generate_until":
        return None if first is None else str(first)
    if task.OUTPUT_TYPE == "multiple_choice":
        lls = [float(i.filtered_resps[key][0]) for i in insts]
        choices = task.doc_to_choice(insts[0].doc)
        best = max(range(len(lls)), key=lls.__getitem__)
        return str(choices[best]) if best < len(choices) else str(best)
    return None
