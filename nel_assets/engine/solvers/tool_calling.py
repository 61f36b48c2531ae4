"""The `tool_calling` solver: nel drives a ReAct loop on the model's native tool calls.

Each turn sends the conversation and the tools (chat completions `tools` / `tool_calls`, or
the Responses API's `function_call` / `function_call_output` items) through nel's
`ModelClient`, so retries, concurrency, token accounting and the interceptor chain apply to
every turn, and `session_id` is the sample id (the chain's turn counter and cache see one
session per sample). The model's tool calls of a turn (one or several, "parallel" calls)
are routed by name to the `ToolSource` that declared the tool and run in the order given
(they share the sandbox's state, so running them at once would race). Whatever goes wrong
with a call (unknown tool, arguments that are not a JSON object, a tool that fails, hangs
past `tool_timeout` or floods) is answered to the model as the call's result and recorded;
it never stops the run. The loop ends when the model answers without calling a tool, or
after `max_turns` turns (the sample then fails with `max_turns_exhausted`).

Every model turn and tool result becomes an ATIF step (NeMo Evaluator's trajectory format)
in `SolveResult.steps`, with tokens and latency per turn and exit code, latency, error and
truncation per tool result. No Dagster here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from benchmarks._types import SeedResult
from benchmarks.errors import NelError
from nel_assets.engine.evaluation.image_parts import stored_messages
from nel_assets.engine.evaluation.loop import build_request
from nel_assets.engine.solvers.agent_patch import patch_task_sandbox
from nel_assets.engine.solvers.base import SolveContext, SolveResult, ToolOutcome, ToolSource
from nel_assets.engine.solvers.output_cap import cap_text
from nel_resources.model_client import ModelClient, ModelError, ModelResponse

#: A source gets this long past `tool_timeout` to stop its own call before nel abandons it
#: (the sandbox kills a command at `tool_timeout` itself and reports it).
TOOL_TIMEOUT_GRACE_S = 5.0

#: The answer of `response_mode: sandbox_artifact` when the sandbox config names no
#: `capture_cmd`: every change to the workdir as a patch, untracked files included, taken
#: through a scratch index so the repository's own index is left as the agent left it.
GIT_DIFF_CMD = ('t=$(mktemp) && { cp "$(git rev-parse --git-dir)/index" "$t" 2>/dev/null || true; } '
                '&& GIT_INDEX_FILE="$t" git add -A >/dev/null && GIT_INDEX_FILE="$t" git diff '
                '--cached --binary; rc=$?; rm -f "$t"; exit $rc')


#: The stand-in sandbox `prepare` lists the tools with (no tool is called with it).
_LISTING_ONLY = object()


class ToolCall:
    """One tool call as the model made it."""

    __slots__ = ("arguments", "call_id", "error", "name", "raw_arguments")

    def __init__(self, call_id: str, name: str, raw_arguments: Any) -> None:
        self.call_id, self.name, self.raw_arguments = call_id, name, raw_arguments
        self.arguments: dict[str, Any] = {}
        self.error: str | None = None
        if isinstance(raw_arguments, dict):
            self.arguments = raw_arguments
            return
        text = raw_arguments if isinstance(raw_arguments, str) else ""
        try:
            parsed = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError as exc:
            self.error = f"the arguments are not valid JSON ({exc})"
            return
        if not isinstance(parsed, dict):
            self.error = f"the arguments must be a JSON object, not {type(parsed).__name__}"
            return
        self.arguments = parsed


class ToolCallingSolver:
    """The ReAct loop over the model's native tool calls (NeMo Evaluator's `tool_calling`).

    Args:
        client: nel's ModelClient (chat_completions or responses protocol).
        sources: Where the tools come from; each tool name must be declared once.
        max_turns: Model calls at most; a model still calling tools then fails the sample.
        system_prompt: Put before the benchmark's own system prompt.
        tool_timeout: Seconds one tool call may take.
        max_output_chars: What the model sees of one tool result (head and tail kept).
        response_mode: `last_message` (the model's last answer) or `sandbox_artifact` (the
            sandbox's state: `artifact_cmd`'s output, by default a `git diff` of the workdir).
        artifact_cmd: The command whose output is the artifact (the sandbox's `capture_cmd`).
    """

    def __init__(self, client: ModelClient, sources: list[ToolSource], *, max_turns: int = 50,
                 system_prompt: str | None = None, tool_timeout: float = 180.0,
                 max_output_chars: int = 16384, response_mode: str = "last_message",
                 artifact_cmd: str | None = None, image_detail: str = "auto") -> None:
        if client.protocol not in ("chat_completions", "responses"):
            raise NelError(f"the tool_calling solver needs a chat_completions or responses "
                           f"endpoint, not {client.protocol}")
        if not sources:
            raise NelError("the tool_calling solver needs a tool source (sandbox_tools or "
                           "resource_service)")
        self.client = client
        self.sources = list(sources)
        self.image_detail = image_detail  # `detail` of a seed's image parts
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.tool_timeout = tool_timeout
        self.max_output_chars = max_output_chars
        self.response_mode = response_mode
        self.artifact_cmd = artifact_cmd or GIT_DIFF_CMD

    @property
    def answer_is_sandbox_state(self) -> bool:
        """The answer is what the agent left in the sandbox: an empty patch is no empty reply."""
        return self.response_mode == "sandbox_artifact"

    async def routes(self, ctx: SolveContext) -> tuple[dict[str, ToolSource], list[dict[str, Any]]]:
        """(tool name -> its source, every tool spec) for one sample.

        Raises:
            NelError: two sources declare the same tool name (one line naming both).
        """
        route: dict[str, ToolSource] = {}
        specs: list[dict[str, Any]] = []
        for src in self.sources:
            for spec in await src.specs(ctx):
                name = str((spec.get("function") or spec).get("name") or "")
                if name in route:
                    raise NelError(f"tool {name!r} is declared by both {_source_name(route[name])} "
                                   f"and {_source_name(src)}: a tool name must be unique across "
                                   "a tool_calling solver's sources")
                route[name] = src
                specs.append(spec)
        return route, specs

    async def prepare(self) -> None:
        """Check the tools once at the shard's start, before any model request: every source
        lists its tools (a Gym resources server's `/openapi.json` is fetched) and a name
        declared by two sources stops the run here, not at the first sample.

        Raises:
            NelError: a tool name declared twice, or a source that cannot list its tools.
        """
        # Listed as for a sample that has a sandbox: the sandbox tools only offer themselves
        # then, and the factory gives them only to a benchmark with a sandbox.
        await self.routes(SolveContext("shard-start", sandbox=_LISTING_ONLY))

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """Run the loop for one problem; failures come back in the result, never raised
        (except AuthError, which stops the run, and a tool-name clash, a config error)."""
        ctx = ctx or SolveContext("0:0")
        limit = agent_timeout(task)
        try:
            if limit is None:
                return await self._solve(task, ctx)
            started: list[SolveResult] = []
            try:
                async with asyncio.timeout(limit) as cm:
                    return await self._solve(task, ctx, started)
            except TimeoutError:
                if not cm.expired():
                    raise
                return _timed_out(started[0] if started else SolveResult(""), limit)
        finally:
            # Sources that keep per-sample state (a bash working directory, a Gym session
            # cookie) forget it here.
            for src in self.sources:
                for hook in ("end_sample", "end_session"):
                    end = getattr(src, hook, None)
                    if end is not None:
                        end(ctx)

    async def close_tools(self) -> None:
        """Release what the tool sources hold between samples (HTTP sessions)."""
        for src in self.sources:
            close = getattr(src, "close", None)
            if close is not None:
                await close()

    async def _solve(self, task: SeedResult, ctx: SolveContext,
                     started: list[SolveResult] | None = None) -> SolveResult:
        route, specs = await self.routes(ctx)
        responses = self.client.protocol == "responses"
        wire_tools = [_responses_tool(s) for s in specs] if responses else specs
        messages, _, _ = build_request(task, self.client.protocol, self.system_prompt,
                                       self.image_detail)
        assert messages is not None
        conversation: list[dict[str, Any]] = list(messages)
        steps: list[dict[str, Any]] = [
            _step(m) for m in (stored_messages(messages) if task.images else messages)
            if m.get("role") in ("system", "user")]
        result = SolveResult(response="", steps=steps)
        if started is not None:
            started.append(result)  # what the loop did so far, if the agent timeout cuts it
        for src in self.sources:
            # A source with per-sample sessions (a Gym resources server's `seed_session`)
            # opens the sample's session before the first turn.
            opener = getattr(src, "open_session", None)
            if opener is None:
                continue
            opened = await opener(task, ctx)
            if opened is not None and opened.error is not None:
                result.error = f"{_source_name(src)}: opening the sample's session failed: {opened.error}"[:1000]
                result.failure_category = "tool_error"
                steps.append({"source": "system", "message": result.error,
                              "extra": {"failure_category": "tool_error"}})
                for i, st in enumerate(steps, start=1):
                    st["step_id"] = i
                return result
        failures: list[str] = []
        n_calls = 0
        resp: ModelResponse | None = None
        calls: list[ToolCall] = []
        for turn in range(1, self.max_turns + 1):
            try:
                resp = await self.client.generate(conversation, overrides={"tools": wire_tools},
                                                  repeat=ctx.repeat, session_id=ctx.sample_id)
            except ModelError as exc:
                result.error = f"model call on turn {turn} failed: {exc}"[:1000]
                result.failure_category = exc.category
                break
            result.turns = turn
            result.model_response = resp
            _add_tokens(result, resp)
            calls, said = (_responses_calls(resp) if responses else _chat_calls(resp))
            steps.append(_agent_step(resp, calls, turn))
            if not calls:
                break
            conversation.extend(said)
            for call in calls:
                n_calls += 1
                outcome = await self._run(call, route, ctx)
                steps.append(_observation_step(call, outcome, turn))
                if outcome.error is not None:
                    failures.append(_attribution(call.name, turn, outcome))
                conversation.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": outcome.content}
                    if responses else
                    {"role": "tool", "tool_call_id": call.call_id, "content": outcome.content})
        result.scoring_details = {"tool_calls": n_calls}
        if failures:
            result.scoring_details["tool_failures"] = failures
        if result.error is None and calls:  # the last turn still called tools
            result.failure_category = "max_turns_exhausted"
            last = f"; last tool failure: {failures[-1]}" if failures else ""
            result.error = (f"max_turns_exhausted: the model still called tools after "
                            f"{self.max_turns} turns{last}")
        elif result.error is not None and failures:
            result.error = f"{result.error}; last tool failure: {failures[-1]}"[:1000]
        if result.error is not None:
            steps.append({"source": "system", "message": result.error,
                          "extra": {"failure_category": result.failure_category}})
        elif self.answer_is_sandbox_state:
            result.response = await self._artifact(ctx, steps)
        elif resp is not None:
            result.response = resp.content or _last_said(steps)
        if result.error is None and not any(_source_name(s) == "sandbox_tools" for s in self.sources):
            # Tools outside the task's sandbox (a Gym resources server): the agent's work
            # reaches a Harbor task's sandbox as the patch in its answer (`agent_patch`).
            patched = await patch_task_sandbox(task.metadata, ctx.sandbox, result.response)
            if patched is not None:
                result.scoring_details["agent_patch"] = patched[0]
                steps.append(patched[1])
        result.trajectory = conversation
        for i, s in enumerate(steps, start=1):
            s["step_id"] = i
        return result

    async def _run(self, call: ToolCall, route: dict[str, ToolSource], ctx: SolveContext) -> ToolOutcome:
        t0 = time.perf_counter()
        src = route.get(call.name)
        if call.error is not None:
            out = ToolOutcome(f"Error: {call.name}: {call.error}; call it again with a JSON "
                              f"object of arguments", error=f"malformed arguments: {call.error}")
        elif src is None:
            known = ", ".join(sorted(route)) or "none"
            out = ToolOutcome(f"Error: there is no tool named {call.name!r}; the tools are: {known}",
                              error="unknown tool")
        else:
            try:
                out = await asyncio.wait_for(src.call(call.name, call.arguments, ctx),
                                             self.tool_timeout + TOOL_TIMEOUT_GRACE_S)
            except TimeoutError:
                out = ToolOutcome(f"Error: {call.name} timed out after {self.tool_timeout:g}s "
                                  "and was abandoned",
                                  error=f"timed out after {self.tool_timeout:g}s")
            except Exception as exc:  # a source must return failures; one that raises is recorded
                msg = f"{type(exc).__name__}: {exc}"
                out = ToolOutcome(f"Error: {msg}", error=msg)
        if not out.latency_ms:
            out.latency_ms = (time.perf_counter() - t0) * 1000.0
        content, cut = cap_text(out.content, self.max_output_chars)
        out.content, out.truncated = content, out.truncated or cut
        return out

    async def _artifact(self, ctx: SolveContext, steps: list[dict[str, Any]]) -> str:
        """`sandbox_artifact`: the artifact command's output in the sample's sandbox."""
        sb = ctx.sandbox
        if sb is None:
            steps.append({"source": "system", "message": "no sandbox: the artifact is empty"})
            return ""
        res = await sb.exec(["bash", "-c", self.artifact_cmd], timeout_sec=self.tool_timeout,
                            cwd=sb.spec.workdir)
        steps.append({"source": "system", "message": "sandbox artifact captured",
                      "extra": {"command": self.artifact_cmd, "exit_code": res.return_code,
                                "bytes": len(res.stdout), "stderr": res.stderr[-500:] or None}})
        return res.stdout if res.return_code == 0 else ""

    async def close(self) -> None:
        """Close the client's connections."""
        await self.client.close()


def agent_timeout(task: SeedResult) -> float | None:
    """The task's own cap on the whole agent loop, in seconds (a Harbor task's `[agent]
    timeout_sec`: seed metadata `agent_timeout_s`, or NeMo Evaluator's `agent_timeout_sec`)."""
    for key in ("agent_timeout_s", "agent_timeout_sec"):
        v = (task.metadata or {}).get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _timed_out(result: SolveResult, limit: float) -> SolveResult:
    """The loop as far as it got when the task's agent timeout ended it. As in Harbor, this
    is no error of the run: the sandbox is verified as the agent left it (usually a 0)."""
    result.response = result.response or _last_said(result.steps)
    calls = sum(len(st.get("tool_calls") or []) for st in result.steps if st.get("source") == "agent")
    result.scoring_details = {"tool_calls": calls, **result.scoring_details,
                              "agent_timed_out": True, "agent_timeout_s": limit}
    result.steps.append({"source": "system",
                         "message": f"agent timeout: the loop was stopped after {limit:g}s "
                                    "(the task's [agent] timeout_sec)",
                         "extra": {"agent_timed_out": True}})
    for i, st in enumerate(result.steps, start=1):
        st["step_id"] = i
    return result


def _source_name(src: Any) -> str:
    return str(getattr(src, "name", None) or type(src).__name__)


def _step(message: dict[str, Any]) -> dict[str, Any]:
    """The ATIF step of a system or user message; its images, by `nel-image:` name, in `extra`."""
    step: dict[str, Any] = {"source": "system" if message.get("role") == "system" else "user",
                            "message": _text(message.get("content"))}
    content = message.get("content")
    if isinstance(content, list):
        refs = [str(p["image_url"]["url"] if isinstance(p.get("image_url"), dict) else p.get("image_url"))
                for p in content if isinstance(p, dict) and p.get("type") in ("image_url", "input_image")]
        if refs:
            step["extra"] = {"images": refs}
    return step


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and p.get("type") not in ("image_url", "input_image"))
    return "" if content is None else str(content)


def _responses_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """A chat `tools` entry in the Responses API's flat shape."""
    fn = spec.get("function")
    if not isinstance(fn, dict):
        return spec
    return {"type": "function", **fn}


def _chat_calls(resp: ModelResponse) -> tuple[list[ToolCall], list[dict[str, Any]]]:
    """The tool calls of a chat completion and the assistant message that carries them."""
    choices = (resp.raw or {}).get("choices") or [{}]
    msg = choices[0].get("message") or {}
    raw_calls = msg.get("tool_calls") or []
    calls = []
    for i, tc in enumerate(raw_calls):
        fn = tc.get("function") or {}
        calls.append(ToolCall(str(tc.get("id") or f"call_{i}"), str(fn.get("name") or ""),
                              fn.get("arguments")))
    said = {"role": "assistant", "content": msg.get("content") or None, "tool_calls": raw_calls}
    return calls, [said]


def _responses_calls(resp: ModelResponse) -> tuple[list[ToolCall], list[dict[str, Any]]]:
    """The `function_call` items of a Responses-API reply and the output items to send back."""
    calls, said = [], []
    for item in (resp.raw or {}).get("output") or []:
        kind = item.get("type")
        if kind == "function_call":
            calls.append(ToolCall(str(item.get("call_id") or item.get("id") or ""),
                                  str(item.get("name") or ""), item.get("arguments")))
            said.append({k: item[k] for k in ("type", "call_id", "name", "arguments") if k in item})
        elif kind == "message":
            said.append({"role": "assistant", "content": _text(item.get("content"))})
    return calls, said


def _add_tokens(result: SolveResult, resp: ModelResponse) -> None:
    if resp.prompt_tokens is not None:
        result.prompt_tokens = (result.prompt_tokens or 0) + resp.prompt_tokens
    if resp.completion_tokens is not None:
        result.completion_tokens = (result.completion_tokens or 0) + resp.completion_tokens


def _agent_step(resp: ModelResponse, calls: list[ToolCall], turn: int) -> dict[str, Any]:
    step: dict[str, Any] = {"source": "agent", "message": resp.content or "", "model_name": resp.model}
    if resp.reasoning_content:
        step["reasoning_content"] = resp.reasoning_content
    step["tool_calls"] = [{"tool_call_id": c.call_id, "function_name": c.name,
                           "arguments": c.arguments if c.error is None else c.raw_arguments}
                          for c in calls]
    step["metrics"] = {"prompt_tokens": resp.prompt_tokens,
                       "completion_tokens": resp.completion_tokens,
                       "extra": {"latency_ms": round(resp.latency_ms, 3), "attempts": resp.attempts}}
    step["extra"] = {"turn": turn, "finish_reason": resp.finish_reason}
    return step


def _observation_step(call: ToolCall, out: ToolOutcome, turn: int) -> dict[str, Any]:
    return {"source": "system", "message": out.content,
            "observation": {"results": [{"source_call_id": call.call_id, "content": out.content,
                                         "is_error": out.error is not None}]},
            "extra": {"turn": turn, "function_name": call.name, "exit_code": out.exit_code,
                      "latency_ms": round(out.latency_ms, 3), "error": out.error,
                      "truncated": out.truncated}}


def _attribution(name: str, turn: int, out: ToolOutcome) -> str:
    """`bash() failed on turn 3 with exit code 1` (or the error, for other failures)."""
    if out.exit_code not in (None, 0) and (out.error or "").startswith("exit code"):
        return f"{name}() failed on turn {turn} with exit code {out.exit_code}"
    return f"{name}() failed on turn {turn}: {out.error}"


def _last_said(steps: list[dict[str, Any]]) -> str:
    for s in reversed(steps):
        if s.get("source") == "agent" and s.get("message"):
            return str(s["message"])
    return ""
