"""`results.jsonl` and `trajectories.jsonl` lines of a batch of stored rows, built column by
column: the same bytes as `nemo_format.result_row` / `trajectory_row` / `atif` give row by
row, at a fraction of the CPU.

Where the time went row by row: a dict per row from `to_pylist`, `_details` and the
`.get` lookups done twice (once per file), and three SHA-256 digests per row, two of them
(`request_hash` over the prompt, `response_hash` over the answer) repeated for every repeat
of a question. Here each column is converted once, each row's shared pieces (details,
metadata, ATIF document) are built once for both lines, and the repeated digests come from a
small bounded cache. Agentic rows (a `steps` column) keep the row-by-row path: they are few
and their ATIF document is the stored steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from nel_assets.engine.nemo import nemo_format as nf

if TYPE_CHECKING:
    import pyarrow as pa

# The columns the lines read (`nemo_format.result_row`, `trajectory_row`, `atif`).
LINE_COLUMNS = ("run_id", "model_id", "shard", "problem_idx", "repeat", "sample_id", "category",
                "prompt", "system", "messages", "expected", "response", "reasoning", "reward",
                "extracted", "method", "details", "metadata", "finish_reason", "prompt_tokens",
                "completion_tokens", "reasoning_tokens", "seed_ms", "model_ms", "verify_ms",
                "total_ms", "attempts", "error", "failure_category", "timestamp", "turns",
                "tool_calls", "steps", "images")

_CACHE_MAX = 4096  # digests kept per cache: repeats of a question sit close together
_EMPTY_MSGS = "[]"


class _DigestCache:
    """`nemo_format._short_hash` of recently seen texts (bounded: cleared when full, so a
    large export holds at most `_CACHE_MAX` texts alive)."""

    def __init__(self) -> None:
        self._d: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        h = self._d.get(text)
        if h is None:
            if len(self._d) >= _CACHE_MAX:
                self._d.clear()
            h = self._d[text] = nf._short_hash(text)
        return h


def _messages_text(msgs: str | None, response: str | None, reasoning: str | None) -> str:
    """`nemo_format._messages` of an answered row (same text; the common `...}]` ending
    skips the strip copies)."""
    msgs = msgs or _EMPTY_MSGS
    turn: dict[str, Any] = {"role": "assistant", "content": response}
    if reasoning:
        turn["reasoning_content"] = reasoning
    if msgs.endswith("}]"):
        return f"{msgs[:-1]},{orjson.dumps(turn).decode()}]"
    head = msgs.rstrip()[:-1].rstrip()
    sep = "" if head.endswith("[") else ","
    return f"{head}{sep}{orjson.dumps(turn).decode()}]"


class LineBuilder:
    """Builds both files' lines batch by batch; holds the per-export constants and caches."""

    def __init__(self, *, messages: bool = False) -> None:
        """`messages`: write nel's `messages` key in trajectory lines (see
        `nemo_format.trajectory_row`)."""
        self._messages = messages
        self._version = nf._nel_version()
        self._request_hash = _DigestCache()
        self._response_hash = _DigestCache()
        self._agents: dict[Any, dict[str, Any]] = {}  # ATIF `agent` per model id

    def _agent(self, model_id: Any) -> dict[str, Any]:
        a = self._agents.get(model_id)
        if a is None:
            a = self._agents[model_id] = {"name": "nel", "version": self._version, "model_name": model_id}
        return a

    def lines(self, batch: pa.RecordBatch | pa.Table) -> tuple[list[bytes], list[bytes]]:
        """(`results.jsonl` lines, `trajectories.jsonl` lines) of the batch's rows, each
        ending in a newline."""
        n = batch.num_rows
        names = set(batch.schema.names)
        # A column an older shard file lacks reads as None, as `row.get` gives it.
        # (the request messages, the longest text, are converted only when written)
        cols = {c: (batch.column(c).to_pylist() if c in names and (self._messages or c != "messages")
                    else [None] * n) for c in LINE_COLUMNS}
        dumps, opt = orjson.dumps, orjson.OPT_APPEND_NEWLINE
        res: list[bytes] = []
        trj: list[bytes] = []
        req_hash, resp_hash, agents = self._request_hash, self._response_hash, self._agents
        fragment = orjson.Fragment
        steps_col = cols["steps"]
        # The timings as `_r` rounds them, a column at a time (4 calls a row saved).
        rounded = [[0.0 if x is None or x != x else round(float(x), 2) for x in cols[c]]
                   for c in ("seed_ms", "model_ms", "verify_ms", "total_ms")]
        for i, (run_id, model_id, shard, pidx, rep, sample_id, category, prompt, system, msgs,
                expected, response, reasoning, reward, extracted, method, raw_details, metadata,
                finish, pt, ct, rt, _seed_ms, model_ms, _verify_ms, total_ms, attempts, error,
                fcat, ts, turns, tool_calls, _steps, images, seed_r, latency, verify_r, total_r,
                ) in enumerate(zip(*cols.values(), *rounded, strict=True)):
            if steps_col[i]:
                r, t = self._row_by_row({c: v[i] for c, v in cols.items()}, self._messages)
                res.append(r)
                trj.append(t)
                continue
            failed = error is not None
            session = nf._short_hash(f"{run_id}:{sample_id}")
            prompt_s = prompt or ""
            # scoring_details (nemo_format._details), once for both lines
            if failed:
                details: Any = {"error": error, **nf._FAILED_DETAILS, "failure_category": fcat}
                scorer_rewards: dict[str, Any] = {}
            elif not raw_details:
                details, scorer_rewards = {}, {}
            elif nf.has_scorers(raw_details):
                details = orjson.loads(raw_details)
                scorer_rewards = nf.scorer_rewards(details)
            else:
                details, scorer_rewards = fragment(raw_details), {}
            meta: Any = fragment(metadata) if metadata else {}
            reward_out = 0.0 if reward is None else reward
            tokens = int(pt or 0) + int(ct or 0)
            timing = {"seed_ms": seed_r, "model_ms": latency, "verify_ms": verify_r, "total_ms": total_r}
            retries = max(0, int(attempts or 1) - 1)
            usage = {"prompt_tokens": pt, "completion_tokens": ct, "reasoning_tokens": rt}
            if failed:
                res.append(dumps({
                    "problem_idx": pidx, "repeat": rep, "reward": reward_out,
                    "scorer_rewards": scorer_rewards, "prompt": prompt_s,
                    "model_response": response or "", "extracted_answer": extracted,
                    "expected_answer": expected, "scoring_details": details, "metadata": meta,
                    "tokens": tokens, "latency_ms": latency,
                    "sample_id": sample_id, "shard": shard, "category": category, "expected": expected,
                    "response": response, "extracted": extracted, "method": method,
                    "failure_category": fcat, "error": error, "finish_reason": finish,
                    "model_ms": model_ms, "total_ms": total_ms, "prompt_tokens": pt,
                    "completion_tokens": ct}, default=str, option=opt))
                out: dict[str, Any] = {
                    "step_id": session[:12], "problem_idx": pidx, "repeat": rep, "timestamp": ts,
                    "prompt": prompt_s, "expected_answer": expected, "reward": reward_out,
                    "extracted_answer": extracted, "scoring_method": "infra_error",
                    "scoring_details": details, "seed_metadata": meta, "timing": timing,
                    "failure_category": fcat, "retries": retries, "model_error": error}
                if system:
                    out["system_prompt"] = system
                out["sample_id"] = sample_id
                if self._messages:
                    out["messages"] = fragment(msgs or _EMPTY_MSGS)
                out.update(finish_reason=finish, error=error, usage=usage, attempts=attempts)
                if turns is not None:
                    out.update(turns=turns, tool_calls=tool_calls)
                trj.append(dumps(out, default=str, option=opt))
                continue
            # the ATIF document (nemo_format.atif of an answered chat row), serialized once
            # for both lines
            content = response or ""
            user = {"source": "user", "message": prompt_s, "step_id": 2 if system else 1}
            if images:  # the images sent with the prompt, by name (`nel-image:<sha256>`)
                user["extra"] = {"images": orjson.loads(images)}
            agent: dict[str, Any] = {"source": "agent", "message": content, "model_name": model_id}
            if reasoning:
                agent["reasoning_content"] = reasoning
            if pt is not None and ct is not None:
                agent["metrics"] = {"prompt_tokens": pt, "completion_tokens": ct}
            if system:
                agent["step_id"] = 3
                steps = [{"source": "system", "message": system, "step_id": 1}, user, agent]
            else:
                agent["step_id"] = 2
                steps = [user, agent]
            final: dict[str, Any] = ({"total_steps": len(steps)} if pt is None or ct is None else
                                     {"total_steps": len(steps), "total_prompt_tokens": pt,
                                      "total_completion_tokens": ct})
            traj = fragment(dumps([{"schema_version": nf.ATIF_VERSION, "session_id": session,
                                    "agent": agents.get(model_id) or self._agent(model_id),
                                    "steps": steps,
                                    "final_metrics": final}], default=str))
            res.append(dumps({
                "problem_idx": pidx, "repeat": rep, "reward": reward_out,
                "scorer_rewards": scorer_rewards, "prompt": prompt_s,
                "model_response": content, "extracted_answer": extracted,
                "expected_answer": expected, "scoring_details": details, "metadata": meta,
                "tokens": tokens, "latency_ms": latency, "trajectory": traj,
                "sample_id": sample_id, "shard": shard, "category": category, "expected": expected,
                "response": response, "extracted": extracted, "method": method,
                "failure_category": fcat, "error": error, "finish_reason": finish,
                "model_ms": model_ms, "total_ms": total_ms, "prompt_tokens": pt,
                "completion_tokens": ct}, default=str, option=opt))
            out = {
                "step_id": session[:12], "problem_idx": pidx, "repeat": rep, "timestamp": ts,
                "prompt": prompt_s, "expected_answer": expected, "reward": reward_out,
                "extracted_answer": extracted, "scoring_method": method or "",
                "scoring_details": details, "seed_metadata": meta, "timing": timing,
                "failure_category": fcat, "retries": retries,
                "model": {
                    "content": content, "model": model_id or "", "finish_reason": finish or "",
                    "tokens": {"prompt": pt, "completion": ct, "total": tokens, "reasoning": rt},
                    "latency_ms": latency,
                    "request_hash": req_hash(f"{prompt_s}|{system or ''}|{model_id or ''}"),
                    "response_hash": resp_hash(content),
                },
                "trajectory": traj}
            if system:
                out["system_prompt"] = system
            out["sample_id"] = sample_id
            if self._messages:
                out["messages"] = fragment(_messages_text(msgs, response, reasoning))
            out.update(finish_reason=finish, error=error, usage=usage, attempts=attempts)
            if turns is not None:
                out.update(turns=turns, tool_calls=tool_calls)
            trj.append(dumps(out, default=str, option=opt))
        return res, trj

    @staticmethod
    def _row_by_row(row: dict[str, Any], messages: bool = False) -> tuple[bytes, bytes]:
        """Both lines of one row through `nemo_format`'s row functions (agentic rows)."""
        dumps, opt = orjson.dumps, orjson.OPT_APPEND_NEWLINE
        t = nf.atif(row)
        frag = None if t is None else orjson.Fragment(dumps(t, default=str))
        return (dumps(_spliced(nf.result_row(row, t), frag), default=str, option=opt),
                dumps(_spliced(nf.trajectory_row(row, t, messages=messages), frag), default=str, option=opt))


def _spliced(line: dict[str, Any], traj: Any) -> dict[str, Any]:
    """`line` with its `trajectory` replaced by the already-serialized ATIF document (the
    same bytes orjson would write; each document is serialized once for both files)."""
    if traj is not None and "trajectory" in line:
        line["trajectory"] = traj
    return line

