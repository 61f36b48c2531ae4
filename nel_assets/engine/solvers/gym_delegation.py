"""The `gym_delegation` solver: a NeMo Gym agent runs the whole rollout.

nel posts each problem to the agent's `POST /run` (Gym's rollout endpoint: the agent seeds
the resources server's session, loops model calls and tool calls, and verifies). The reply is
the rollout: `response` (the agent's Responses-API output: messages, function calls, their
outputs) and `reward` (the resources server's verdict). With `trust_reward: true` that reward
is the sample's; with `false` nel scores the agent's final answer with the benchmark's own
scorer. On a Harbor task (SWE-bench, terminal-bench) with `false`, the agent's patch (its
reply's `model_patch`, else the diff in its answer) is applied in the sample's sandbox and
the task's tests run there (`agent_patch`), as NeMo Evaluator runs them in a sandbox of its
own; the task's tests and verifier settings are not sent to the agent.

The agent is found as NeMo Evaluator 0.3.0 finds it: `GET /server_instances` on the Gym head
server (`services.<gym_service>.url`) lists every server `ng_run` started; `gym_agent` names one
by its instance name (`process_name`), otherwise the first `responses_api_agents` server is
used. Where 0.3.0 silently falls back to another agent (or to the head server itself) when
the named one is missing, nel fails the sample naming the agents it found; a URL without
`/server_instances` (404) is taken to be the agent itself.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.errors import NelError
from nel_assets.engine.solvers.agent_patch import patch_task_sandbox
from nel_assets.engine.solvers.base import SolveContext, SolveResult
from nel_assets.engine.solvers.gym_steps import gym_output_steps, gym_output_text
from nel_assets.engine.solvers.gym_tools import gym_run_body
from nel_resources.model_client import ModelResponse

if TYPE_CHECKING:
    import aiohttp

    from benchmarks._types import SeedResult

__all__ = ["GymAgentError", "GymDelegationSolver", "find_agent"]

#: Seconds for one rollout when the benchmark's `timeout` does not say (NeMo Evaluator
#: 0.3.0's default).
DEFAULT_RUN_TIMEOUT = 3600.0
_DISCOVERY_TIMEOUT = 30.0
_AGENT_TYPE = "responses_api_agents"


class GymAgentError(NelError):
    """A rollout that produced no answer, with its failure category."""

    def __init__(self, message: str, category: str) -> None:
        super().__init__(message)
        self.category = category


def find_agent(instances: Any, gym_agent: str | None) -> str:
    """The URL of the agent to run, from the head server's `/server_instances` list.

    Raises:
        GymAgentError: when the list is malformed, has no agent, or lacks `gym_agent`.
    """
    if not isinstance(instances, list):
        raise GymAgentError("NeMo Gym head server: /server_instances is not a list",
                            "gym_malformed_reply")
    agents = [i for i in instances if isinstance(i, dict) and i.get("server_type") == _AGENT_TYPE]
    if gym_agent:
        wanted = gym_agent.lower()
        chosen = [i for i in instances if isinstance(i, dict)
                  and str(i.get("process_name", "")).lower() == wanted]
        if not chosen:
            names = ", ".join(str(a.get("process_name")) for a in agents) or "none"
            raise GymAgentError(f"NeMo Gym has no agent {gym_agent!r} (its agents: {names}); "
                                "set `gym_agent` to one of them", "gym_agent_not_found")
    else:
        chosen = agents
        if not chosen:
            raise GymAgentError("NeMo Gym runs no agent (no `responses_api_agents` server in "
                                "/server_instances)", "gym_agent_not_found")
    inst = chosen[0]
    url = inst.get("url") or (f"http://{inst['host']}:{inst['port']}"
                              if inst.get("host") and inst.get("port") else None)
    if not isinstance(url, str):
        raise GymAgentError(f"NeMo Gym agent {inst.get('process_name')!r} has no url in "
                            "/server_instances", "gym_malformed_reply")
    return url.rstrip("/")


class GymDelegationSolver:
    """Runs each problem as one rollout of a NeMo Gym agent (`POST {agent}/run`).

    Args:
        gym_url: The Gym head server (or the agent itself).
        gym_agent: The agent's instance name in Gym's config; None picks the only/first agent.
        trust_reward: Take the agent's reward as the sample's (`SolveResult.reward`); when
            False the reward stays None and the benchmark verifies the answer itself.
        model_id: The model under test, recorded in the trajectory.
        timeout: Seconds for one rollout.
    """

    def __init__(self, gym_url: str, *, gym_agent: str | None = None,
                 trust_reward: bool = False, model_id: str = "",
                 timeout: float = DEFAULT_RUN_TIMEOUT) -> None:
        self.gym_url = gym_url.rstrip("/")
        self.gym_agent = gym_agent
        self.trust_reward = trust_reward
        self.model_id = model_id
        self.timeout = timeout
        self._agent_url: str | None = None
        self._lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._http is None or self._http.closed:
            # No shared cookie jar: each rollout is its own Gym session.
            self._http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                               connector=aiohttp.TCPConnector(limit=0))
        return self._http

    async def agent_url(self) -> str:
        """The agent's URL, discovered once (a failed discovery is retried next sample)."""
        import aiohttp

        if self._agent_url is not None:
            return self._agent_url
        async with self._lock:
            if self._agent_url is not None:
                return self._agent_url
            url = f"{self.gym_url}/server_instances"
            wait = min(_DISCOVERY_TIMEOUT, self.timeout)
            try:
                async with self._session().get(
                        url, timeout=aiohttp.ClientTimeout(total=wait)) as resp:
                    raw = await resp.read()
                    status = resp.status
            except TimeoutError:
                raise GymAgentError(f"NeMo Gym head server {self.gym_url}: no answer to "
                                    f"/server_instances within {wait:g}s",
                                    "timeout") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise GymAgentError(f"NeMo Gym at {self.gym_url} unreachable "
                                    f"({type(exc).__name__}: {exc})", "gym_unreachable") from None
            if status == 404:  # not a head server: the URL is the agent
                self._agent_url = self.gym_url
                return self._agent_url
            if status != 200:
                raise GymAgentError(f"NeMo Gym head server {self.gym_url}: /server_instances "
                                    f"answered HTTP {status}", "gym_http_error")
            try:
                instances = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise GymAgentError(f"NeMo Gym head server {self.gym_url}: /server_instances "
                                    "is not JSON", "gym_malformed_reply") from None
            self._agent_url = find_agent(instances, self.gym_agent)
            return self._agent_url

    async def _rollout(self, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        agent = await self.agent_url()
        try:
            async with self._session().post(
                    f"{agent}/run", data=orjson.dumps(body, default=str),
                    headers={"Content-Type": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError:
            raise GymAgentError(f"NeMo Gym agent {agent}: no rollout within {self.timeout:g}s",
                                "timeout") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise GymAgentError(f"NeMo Gym agent {agent} unreachable "
                                f"({type(exc).__name__}: {exc})", "gym_unreachable") from None
        if status >= 400:
            detail = raw[:300].decode("utf-8", "replace")
            raise GymAgentError(f"NeMo Gym agent {agent}/run answered HTTP {status}: {detail}",
                                "gym_http_error")
        try:
            reply = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise GymAgentError(f"NeMo Gym agent {agent}/run: reply is not JSON",
                                "gym_malformed_reply") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("response"), dict):
            raise GymAgentError(f"NeMo Gym agent {agent}/run: reply has no `response` object",
                                "gym_malformed_reply")
        if self.trust_reward and not _is_number(reply.get("reward")):
            raise GymAgentError(f"NeMo Gym agent {agent}/run: reply has no numeric `reward` "
                                "(trust_reward is on)", "gym_malformed_reply")
        return reply

    async def solve(self, task: SeedResult, ctx: SolveContext | None = None) -> SolveResult:
        """One rollout of `task`; failures come back as `SolveResult.error` with a category."""
        body = gym_run_body(task)
        started = time.perf_counter()
        try:
            reply = await self._rollout(body)
        except GymAgentError as exc:
            return SolveResult(response="", error=str(exc), failure_category=exc.category,
                               steps=gym_output_steps(body, [], None))
        latency = (time.perf_counter() - started) * 1000
        response: dict[str, Any] = reply["response"]
        output = [o for o in response.get("output") or [] if isinstance(o, dict)]
        text = gym_output_text(output)
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        prompt_tokens = _int(usage.get("input_tokens"))
        completion_tokens = _int(usage.get("output_tokens"))
        steps = gym_output_steps(body, output, str(response.get("model") or self.model_id or ""))
        reward = float(reply["reward"]) if self.trust_reward else None
        details: dict[str, Any] = {}
        if self.trust_reward:
            details = {"method": "gym_reward", **{
                k: v for k, v in reply.items()
                if k not in ("responses_create_params", "response", "reward")
                and (v is None or isinstance(v, str | int | float | bool))}}
        model_response = ModelResponse(
            content=text, finish_reason=str(response.get("status") or "") or None,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            latency_ms=round(latency, 2), model=str(response.get("model") or self.model_id),
            total_tokens=_int(usage.get("total_tokens")))
        trajectory = [*body["responses_create_params"]["input"],
                      {"role": "assistant", "content": text}]
        if not self.trust_reward:
            patched = await patch_task_sandbox(task.metadata, ctx.sandbox if ctx else None,
                                               text, reply)
            if patched is not None:
                details["agent_patch"] = patched[0]
                steps.append(patched[1])
        return SolveResult(
            response=text, model_response=model_response, trajectory=trajectory,
            reward=reward, scoring_details=details, steps=steps,
            turns=sum(1 for s in steps if s.get("source") == "agent"),
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    async def close(self) -> None:
        """Close the HTTP connections."""
        if self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None

    async def close_tools(self) -> None:
        """The shard's end (the same as `close`: the agent's model client is Gym's, not nel's)."""
        await self.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
