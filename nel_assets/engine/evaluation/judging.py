"""LLM-as-judge and extra scorers: builds the grader a shard uses from `scoring` config.

`scoring: {include_defaults, metrics: [{type: scorer|judge, name, service, ...}], primary}`:

- `include_defaults` keeps the benchmark's own scorer as the metric called `default`;
- `type: scorer` metrics run a scorer of `benchmarks.scoring` (`numeric_match`,
  `exact_match`, ...) on the same response, with `params` as keyword options;
- `type: judge` metrics send the benchmark's grader prompt (`benchmarks.judges`; the
  benchmark's `judge_kind`, else the generic `correctness` kind, or `params.kind`) to the
  judge service `service` through the ordinary model client (retries, concurrency, token
  accounting). What the judge saw and said goes into `scoring_details["judge"]`.
- `primary` names the metric that becomes the sample's reward. Default: the first judge
  metric for benchmarks graded by a judge (`judge_kind` set), else `default`, else the
  first metric.

A judge reply that cannot be parsed, or a judge request that fails, raises JudgeError: the
sample is recorded as a `judge_error` with a null reward, never as a 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import EvalEnvironment, SeedResult, VerifyResult
from benchmarks.errors import NelError
from benchmarks.judge_rubric import (
    DEFAULT_MAX_SCORE,
    RUBRIC_MAX_TOKENS,
    RUBRIC_TEMPERATURE,
    RUBRIC_TEMPLATE,
    RubricJudge,
    check_rubric,
)
from benchmarks.scoring import SCORERS
from benchmarks.uri_schemes import scheme_of
from nel_resources.config import ScoringMetric, ServiceConfig
from nel_resources.specs import RunSpec

if TYPE_CHECKING:  # the loop and aiohttp load when a shard runs, not when a config is checked
    from nel_assets.engine.evaluation.loop import Judge
    from nel_resources.model_client import ModelClient

# Benchmarks 0.3.0 grades with a judge of their own (not its rubric): nel's kind stands in.
_OWN_GRADER_IN_NEMO = frozenset({"healthbench", "xstest", "pinchbench"})

# Judge options only the rubric kind reads (`system_prompt`, `temperature`, `timeout` and
# `max_retries` apply to every kind).
_RUBRIC_OPTIONS = ("rubric", "rubric_file", "max_score", "reference_free", "swap_check")

# Scorers a `type: scorer` metric may name: the names (and aliases) of the scorer table.
SCORER_NAMES = tuple(SCORERS.names(aliases=True))

#: The `params.kind` nel_resources.config.nemo_judges writes on a NeMo-spelled judge metric
#: (the engine takes specs, not the config package: a test checks the two agree).
NEMO_KIND = "nemo"


class MissingJudgeError(NelError):
    """A judge-graded benchmark configured without a judge: it cannot run as written (a
    suite runs its other benchmarks; alone, the config is refused)."""


def _scorer(name: str) -> Callable[..., VerifyResult]:
    if name not in SCORERS:
        raise NelError(f"unknown scorer metric {name!r}; choose from {', '.join(SCORER_NAMES)}")
    return SCORERS.load(name)  # type: ignore[no-any-return]


def _item_options(m: ScoringMetric, seed: SeedResult) -> dict[str, Any]:
    """A scorer metric's params, plus the item's option count (`n_options` in its metadata)
    when the scorer takes one and the config sets neither it nor `letters`: an `mcq_extract`
    metric on a 10-option item must read the letters A-J, not the default A-D."""
    n = seed.metadata.get("n_options")
    if not isinstance(n, int) or "n_options" in m.params or "letters" in m.params:
        return m.params
    if "n_options" not in _scorer_options(m.name):
        return m.params
    return {**m.params, "n_options": n}


_OPTIONS: dict[str, frozenset[str]] = {}


def _scorer_options(name: str) -> frozenset[str]:
    """The keyword options a scorer declares (looked up once per name)."""
    if name not in _OPTIONS:
        import inspect

        _OPTIONS[name] = frozenset(inspect.signature(_scorer(name)).parameters)
    return _OPTIONS[name]


def _check_scorer_params(benchmark: str, name: str, params: dict[str, Any]) -> None:
    """A scorer's `params` must be options it takes, of its options' types: the scorers
    swallow unknown keywords (`**_opts`), so a typo would silently score with defaults."""
    import inspect

    fn = _scorer(name)
    options = {p.name: p for p in inspect.signature(fn).parameters.values()
               if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "reasoning"}
    for key, value in params.items():
        opt = options.get(key)
        if opt is None:
            raise NelError(f"{benchmark}: scorer {name!r} has no option {key!r} (its options: "
                           f"{', '.join(sorted(options)) or 'none'})")
        default = opt.default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int | float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True  # None default or a structured option: the scorer checks it
        if not ok:
            raise NelError(f"{benchmark}: scorer {name!r} option {key!r} must be a "
                           f"{type(default).__name__} (got {value!r})")


def _env_class(benchmark: str) -> Any:
    if scheme_of(benchmark) == "gym":
        return None
    from benchmarks import get_factory

    try:
        return get_factory(benchmark)
    except NelError:
        return None


def check_scoring(run: RunSpec) -> None:
    """Fail early (one-line NelError) on a scoring config that cannot run.

    Benchmarks with `requires_judge` need a judge metric; scorer names must be known;
    `primary` must name a metric. (Judge services were resolved, and checked not to be the
    model under test, when the config was resolved.)
    """
    cls = _env_class(run.benchmark)
    if cls is not None and getattr(cls, "requires_judge", False) and not run.judges:
        raise MissingJudgeError(
            f"{run.benchmark} is graded by an LLM judge: add `scoring: {{metrics: [{{type: judge, "
            f"name: {run.benchmark}_judge, service: <judge service>}}]}}` to the benchmark "
            "(and a service with `role: judge`)")
    scoring = run.scoring
    if scoring is None:
        return
    for m in scoring.metrics:
        if m.type == "scorer":
            _check_scorer_params(run.benchmark, m.name, m.params)
        elif m.type == "judge":
            kind = judge_kind_name(m, getattr(cls, "judge_kind", None))
            if kind == "rubric":
                rubric_judge(m)  # an unreadable rubric_file or a broken template, before the run
                continue
            from benchmarks.judges import get_judge_kind

            try:
                get_judge_kind(kind)
            except KeyError as exc:
                raise NelError(f"{run.benchmark}: judge {m.name!r}: {exc.args[0]} (or rubric)") from None
            given = [k for k in _RUBRIC_OPTIONS if getattr(m, k) is not None]
            if given:  # never silently dropped: they mean something only to the rubric kind
                raise NelError(f"{run.benchmark}: judge {m.name!r} grades with the {kind!r} kind, "
                               f"which does not take {', '.join(given)}; remove them or set "
                               "`params: {kind: rubric}`")
    names = {m.name for m in scoring.metrics} | ({"default"} if scoring.include_defaults else set())
    if scoring.primary is not None and scoring.primary not in names:
        raise NelError(f"{run.benchmark}: scoring.primary {scoring.primary!r} is not a metric "
                       f"({', '.join(sorted(names))})")
    if not names:
        raise NelError(f"{run.benchmark}: scoring has no metric (include_defaults is false and "
                       "metrics is empty)")


def judge_kind_name(metric: ScoringMetric, benchmark_kind: str | None) -> str:
    """The grader of a judge metric: `params.kind` when it names one (`nemo` = as NeMo
    Evaluator 0.3.0 grades the benchmark: its rubric, unless 0.3.0 has a grader of the
    benchmark's own, see nel_resources.config.nemo_judges); else the rubric when the metric
    gives one; else the benchmark's kind, else the generic `correctness` kind."""
    name = metric.params.get("kind")
    if name == NEMO_KIND:
        return benchmark_kind if benchmark_kind in _OWN_GRADER_IN_NEMO else "rubric"
    if name:
        return str(name)
    if metric.rubric or metric.rubric_file:
        return "rubric"
    return benchmark_kind or "correctness"


def rubric_judge(metric: ScoringMetric) -> Any:
    """The rubric kind with the metric's options (`rubric`/`rubric_file`, `max_score`,
    `system_prompt` is sent by `_ask`, `reference_free`, `swap_check`)."""
    template = metric.rubric or RUBRIC_TEMPLATE
    if metric.rubric_file:
        try:
            template = Path(metric.rubric_file).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise NelError(f"judge {metric.name!r}: cannot read rubric_file "
                           f"{metric.rubric_file}: {exc.strerror or exc}") from None
    try:
        check_rubric(template)
    except ValueError as exc:
        raise NelError(f"judge {metric.name!r}: {exc}") from None
    return RubricJudge(template=template, max_score=metric.max_score or DEFAULT_MAX_SCORE,
                       reference_free=bool(metric.reference_free),
                       swap_check=bool(metric.swap_check))


def judge_overrides(metric: ScoringMetric, kind: Any) -> dict[str, Any] | None:
    """Generation settings of a judge call: the rubric kind's are 0.3.0's judge client's
    (temperature 0, 2,048 tokens), the metric's `temperature` replacing the first; other
    kinds use the judge service's settings unless the metric sets `temperature`."""
    if isinstance(kind, RubricJudge):
        temperature = RUBRIC_TEMPERATURE if metric.temperature is None else metric.temperature
        return {"temperature": temperature, "max_tokens": RUBRIC_MAX_TOKENS}
    return None if metric.temperature is None else {"temperature": metric.temperature}


@dataclass
class _JudgeMetric:
    metric: ScoringMetric
    service_name: str
    service: ServiceConfig
    client: ModelClient


class Grader:
    """The `Judge` of a shard: runs extra scorers and judge metrics after `env.verify`."""

    def __init__(self, benchmark: str, judges: list[_JudgeMetric],
                 scorers: list[ScoringMetric], include_defaults: bool, primary: str | None,
                 judge_kind: str | None) -> None:
        self.benchmark = benchmark
        self.judges = judges
        self.scorers = scorers
        self.include_defaults = include_defaults
        self.judge_kind = judge_kind
        self._kinds: dict[str, Any] = {}
        if primary is None:
            if judges and judge_kind:
                primary = judges[0].metric.name
            elif include_defaults:
                primary = "default"
            else:
                primary = (judges[0].metric.name if judges else scorers[0].name)
        self.primary = primary

    def _kind(self, jm: _JudgeMetric) -> Any:
        from benchmarks.judges import get_judge_kind

        if jm.metric.name in self._kinds:  # built once: a rubric_file is read once per run
            return self._kinds[jm.metric.name]
        name = judge_kind_name(jm.metric, self.judge_kind)
        if name == "rubric":
            kind = rubric_judge(jm.metric)
        else:
            try:
                kind = get_judge_kind(name)
            except KeyError as exc:
                raise NelError(f"{self.benchmark}: {exc.args[0]}") from None
        self._kinds[jm.metric.name] = kind
        return kind

    async def _ask(self, jm: _JudgeMetric, prompt: str, kind_system: str | None = None,
                   overrides: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        from nel_assets.engine.evaluation.loop import JudgeError
        from nel_resources.model_client import ModelError

        messages: list[dict[str, Any]] = []
        # The metric's `system_prompt` wins, then the service's own; else the kind's
        # (XSTest's authors used one; the rubric kind asks for strict JSON, as 0.3.0 does).
        system = jm.metric.system_prompt or jm.service.system_prompt or kind_system
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        t0 = time.perf_counter()
        try:
            if jm.service.protocol == "completions":
                resp = await jm.client.generate(None, prompt, overrides)
            else:
                resp = await jm.client.generate(messages, None, overrides)
        except ModelError as exc:
            raise JudgeError(f"judge {jm.service_name!r} request failed ({exc.category}): "
                             f"{str(exc)[:300]}") from None
        call = {"messages": messages, "reply": resp.content,
                "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                "latency_ms": round(resp.latency_ms if resp.latency_ms else
                                    (time.perf_counter() - t0) * 1000.0, 3),
                "attempts": resp.attempts}
        return resp.content or "", call

    async def _run_judge(self, jm: _JudgeMetric, seed: SeedResult, response: str,
                         verdict: VerifyResult) -> tuple[float, dict[str, Any]]:
        from benchmarks.judges import JudgeParseError
        from nel_assets.engine.evaluation.loop import JudgeError

        kind = self._kind(jm)
        # A kind that reads the verdict (PinchBench: the prompt its grader built in the
        # sandbox, the automated score it combines with) gets it.
        reads = getattr(kind, "reads_verdict", False)
        requests = kind.requests(seed, response, verdict) if reads else kind.requests(seed, response)
        system = getattr(kind, "system_prompt", None)
        overrides = judge_overrides(jm.metric, kind)
        answers = await asyncio.gather(*(self._ask(jm, r.prompt, system, overrides) for r in requests))
        calls, grades = [], {}
        for req, (reply, call) in zip(requests, answers, strict=True):
            try:
                grades[req.key] = kind.parse(req, reply)
            except JudgeParseError as exc:
                raise JudgeError(f"judge {jm.service_name!r} reply unparseable for "
                                 f"{req.key}: {exc}") from None
            calls.append({"key": req.key, **call, "parsed": grades[req.key]})
        reward, details = kind.score(seed, grades, verdict) if reads else kind.score(seed, grades)
        info: dict[str, Any] = {
            "metric": jm.metric.name, "kind": kind.name, "service": jm.service_name,
            "model": jm.service.model, "reward": reward, **details,
            "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in calls),
            "completion_tokens": sum(c["completion_tokens"] or 0 for c in calls),
            "latency_ms": round(sum(c["latency_ms"] for c in calls), 3),
            "calls": calls,
        }
        if len(calls) == 1:
            # One call: flatten what the judge saw and said for easy reading.
            info.update(messages=calls[0]["messages"], reply=calls[0]["reply"],
                        parsed=calls[0]["parsed"])
        return reward, info

    async def grade(self, env: EvalEnvironment, seed: SeedResult, response: str,
                    reasoning: str | None, verdict: VerifyResult) -> VerifyResult:
        """Run the configured metrics and return the verdict of the primary one."""
        metrics: dict[str, float] = {}
        details = dict(verdict.scoring_details)
        if self.include_defaults:
            metrics["default"] = float(verdict.reward)
        extracted = {"default": verdict.extracted_answer}
        for m in self.scorers:
            v = _scorer(m.name)(response, seed.expected_answer, reasoning=reasoning,
                                **_item_options(m, seed))
            metrics[m.name] = float(v.reward)
            extracted[m.name] = v.extracted_answer
            details.setdefault("scorers", {})[m.name] = v.scoring_details
        if self.judges and not (response or "").strip() and not any(
                getattr(self._kind(jm), "reads_verdict", False) for jm in self.judges):
            # Nothing to grade: the loop scores an empty reply 0 without asking anyone.
            details["judge"] = {"skipped": "empty response"}
            for jm in self.judges:
                metrics[jm.metric.name] = 0.0
        else:
            infos = await asyncio.gather(*(self._run_judge(jm, seed, response, verdict)
                                           for jm in self.judges))
            for jm, (reward, info) in zip(self.judges, infos, strict=True):
                metrics[jm.metric.name] = float(reward)
                extracted[jm.metric.name] = str(info.get("grade") or info.get("class") or
                                                verdict.extracted_answer or "") or None
            if infos:
                by_name = {jm.metric.name: info for jm, (_, info) in zip(self.judges, infos, strict=True)}
                details["judge"] = by_name.get(self.primary, infos[0][1])
                if len(infos) > 1:
                    details["judges"] = by_name
        details["metrics"] = metrics
        details["primary"] = self.primary
        reward = metrics[self.primary]
        scorer_names = {m.name for m in self.scorers}
        # The answer is what the model said; a scorer metric as primary has its own reading.
        answer = extracted[self.primary] if self.primary in scorer_names else verdict.extracted_answer
        if self.primary in metrics and self.primary != "default" and self.primary not in scorer_names:
            details["method"] = "judge"
        return VerifyResult(reward, answer, details, verdict.metadata)


def _with_metric_limits(service: ServiceConfig, metric: ScoringMetric) -> ServiceConfig:
    """The judge service with the metric's `timeout` and `max_retries`, when it gives them."""
    update = {k: getattr(metric, k) for k in ("timeout", "max_retries") if getattr(metric, k) is not None}
    return service.model_copy(update=update) if update else service


@contextlib.asynccontextmanager
async def make_judge(run: RunSpec) -> AsyncIterator[Judge | None]:
    """Yield the grader of a (benchmark, model) run, or None without metrics.

    Raises:
        NelError: a judge-graded benchmark without a judge metric, an unknown scorer, or an
            unreachable judge endpoint.
    """
    from nel_resources.proxy.service_client import client_for_service

    check_scoring(run)
    scoring = run.scoring
    if scoring is None or not scoring.metrics:
        yield None
        return
    cls = _env_class(run.benchmark)
    judge_kind = getattr(cls, "judge_kind", None) if cls is not None else None
    async with contextlib.AsyncExitStack() as stack:
        judges = []
        for j in run.judges:
            service = _with_metric_limits(j.service, j.metric)
            client = client_for_service(service)
            await stack.enter_async_context(client)
            await client.check()
            judges.append(_JudgeMetric(j.metric, j.service_name, service, client))
        scorers = [m for m in scoring.metrics if m.type == "scorer"]
        yield Grader(run.benchmark, judges, scorers, scoring.include_defaults, scoring.primary, judge_kind)
