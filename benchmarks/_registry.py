"""Name -> environment factory registry, with suggestions for unknown names."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks._types import EvalEnvironment
from benchmarks.errors import NelError
from benchmarks.registries import Registry
from benchmarks.uri_schemes import SCHEMES, scheme_of

Factory = Callable[..., EvalEnvironment]

# The built-in benchmarks: name -> the class (or factory) that makes it, imported only when
# the name is used. What `nel list` and `nel data` show about one (`scorer_family`, `source`)
# are attributes of that class: adding a built-in benchmark is its module plus one line here.
BUILTINS: dict[str, str] = {
    "agent_tasks": "benchmarks.builtin.agent_tasks:AgentTasks",
    "arithmetic": "benchmarks.builtin.arithmetic:Arithmetic",
    "drop": "benchmarks.builtin.drop:DROP",
    "gpqa": "benchmarks.builtin.gpqa:GPQA",
    "gsm8k": "benchmarks.builtin.gsm8k:GSM8K",
    "healthbench": "benchmarks.builtin.healthbench:HealthBench",
    "humaneval": "benchmarks.builtin.humaneval:HumanEval",
    "math500": "benchmarks.builtin.math500:MATH500",
    "mgsm": "benchmarks.builtin.mgsm:MGSM",
    "mmlu": "benchmarks.builtin.mmlu:MMLU",
    "mmlu_pro": "benchmarks.builtin.mmlu_pro:MMLUPro",
    "perplexity": "benchmarks.builtin.perplexity:Perplexity",
    "simpleqa": "benchmarks.builtin.simpleqa:SimpleQA",
    "triviaqa": "benchmarks.builtin.triviaqa:TriviaQA",
    "xstest": "benchmarks.builtin.xstest:XSTest",
    "vlm_shapes": "benchmarks.builtin.vlm_shapes:VLMShapes",  # images drawn locally
    # agent benchmarks read from local task files (benchmarks/agentic/builtins.py)
    "nmp_harbor": "benchmarks.agentic.builtins:nmp_harbor",
    "pinchbench": "benchmarks.agentic.builtins:pinchbench",
    "swebench-multilingual": "benchmarks.agentic.builtins:swebench_multilingual",
    "swebench-verified": "benchmarks.agentic.builtins:swebench_verified",
    "terminal-bench-hard": "benchmarks.agentic.builtins:terminal_bench_hard",
    "terminal-bench-v1": "benchmarks.agentic.builtins:terminal_bench_v1",
}

BENCHMARKS: Registry[Factory] = Registry("benchmark", BUILTINS,
                                         hint="run `nel list` to see all benchmarks")
# Names NeMo Evaluator 0.3.0's own examples use that 0.3.0 defines nowhere (no environment,
# playbook or package registers them: its own run of the config fails "Unknown environment"),
# so the refusal says that rather than suggesting look-alikes: the config needs another name.
NEMO_UNDEFINED: dict[str, str] = {
    "research-bench": "examples/configs/23_tool_calling_combined.yaml and walkthrough §10",
}
# Benchmarks registered at run time (`@register`, BYOB files, plugins), by name: a plugin
# load compares this before and after to learn what a file registered.
_ADDED: dict[str, Factory] = {}


class UnknownBenchmarkError(NelError, KeyError):
    """Raised for a benchmark name that is not registered; carries suggestions."""

    def __init__(self, name: str, suggestions: list[str], known: list[str]):
        self.name = name
        self.suggestions = suggestions
        self.known = known
        super().__init__(name)

    def __str__(self) -> str:
        if self.name in NEMO_UNDEFINED:
            return (f"unknown benchmark {self.name!r}: NeMo Evaluator 0.3.0's "
                    f"{NEMO_UNDEFINED[self.name]} name it but define it nowhere (its own run "
                    f"fails \"Unknown environment {self.name!r}\"); put a benchmark that exists "
                    "in `name:` (`nel list`) or your own BYOB file (`module:`)")
        msg = f"unknown benchmark {self.name!r}"
        if self.suggestions:
            msg += f"; did you mean {', '.join(repr(s) for s in self.suggestions)}?"
        msg += " (run `nel list` to see all benchmarks)"
        return msg


def register(name: str) -> Callable[[Factory], Factory]:
    """Register a benchmark factory (a class or a function returning an EvalEnvironment).

    Example:
        @register("my_bench")
        class MyBench(EvalEnvironment): ...
    """

    def deco(factory: Factory) -> Factory:
        BENCHMARKS.put(name, factory)
        _ADDED[name] = factory
        # An environment class that does not name itself takes its registry name, as in
        # NeMo Evaluator (its API-reference example sets no `name`): results, bundles and
        # `/health` then say which benchmark they are.
        if isinstance(factory, type) and "name" not in vars(factory):
            factory.name = name  # type: ignore[attr-defined]
        return factory

    return deco


def registered_at_run_time() -> dict[str, Factory]:
    """The benchmarks `@register` added in this process (BYOB files, plugins), by name."""
    return dict(_ADDED)


def is_builtin(name: str) -> bool:
    """True for a benchmark of nel's own table (not one a file or plugin registered)."""
    return name in BUILTINS and name not in _ADDED


def list_benchmarks() -> list[str]:
    """All registered benchmark names, sorted."""
    return BENCHMARKS.names()


def suggest(name: str, known: list[str]) -> list[str]:
    """Closest known names to `name` (prefix and substring matches first)."""
    low = name.lower()
    hits = [k for k in known if k.startswith(low) or low in k]
    for k in difflib.get_close_matches(low, known, n=3, cutoff=0.5):
        if k not in hits:
            hits.append(k)
    return hits[:3]


def is_file_reference(name: str) -> bool:
    """True for `path/to/file.py` or `path/to/file.py:bench` (a benchmark file, not a name)."""
    return name.endswith(".py") or (".py:" in name and scheme_of(name) is None)


def get_factory(name: str) -> Factory:
    """The factory registered under `name`; raises UnknownBenchmarkError with suggestions.

    `name` may also be a benchmark file (`file.py` or `file.py:bench`, as NeMo Evaluator's
    `--bench ./file.py` accepts), loaded and its benchmark returned, or a URI of a scheme
    whose entry makes factories (`harbor://name@version`, `skills://name`).
    """
    # a Harbor dataset from its local cache, Skills' prepared data, a VLMEvalKit local TSV,
    # an lm-eval task on local data
    if (scheme := scheme_of(name)) in ("harbor", "skills", "vlmevalkit", "lm-eval"):
        return SCHEMES.load(scheme)(name)  # type: ignore[no-any-return]
    if is_file_reference(name):
        from benchmarks.plugins import resolve_benchmark_ref

        name = resolve_benchmark_ref(name)
    key = BENCHMARKS.canonical_or_none(name)
    if key is None:
        # NeMo Evaluator looks names up case-insensitively.
        folded = {k.lower(): k for k in BENCHMARKS.names()}
        key = folded.get(name.lower())
    if key is None:
        known = BENCHMARKS.names()
        raise UnknownBenchmarkError(name, suggest(name, known), known)
    return BENCHMARKS.load(key)


def accepted_params(factory: Factory, hints: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of `hints` that `factory` declares (all of them if it takes `**kwargs`).

    Hints are settings the engine offers every environment (`protocol`, `num_fewshot`);
    an environment that does not take one does not need it, like NeMo Evaluator's
    environments whose `__init__` takes no arguments at all.
    """
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return dict(hints)
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(hints)
    return {k: v for k, v in hints.items() if k in params and k != "self"}


def get_benchmark(name: str, *, hints: Mapping[str, Any] | None = None,
                  **params: Any) -> EvalEnvironment:
    """Instantiate a benchmark by name, file (`x.py[:name]`) or remote `gym://host:port`.

    Args:
        name: Registry name, benchmark file, or `gym://` URL.
        hints: Engine settings passed only where the factory declares them.
        **params: The user's parameters, always passed (an unknown one is a TypeError).
    """
    if scheme_of(name) == "gym":  # a remote environment: its URL is all it needs
        return SCHEMES.load("gym")(name, **params)  # type: ignore[no-any-return]
    factory = get_factory(name)
    _check_params(name, factory, params)
    return factory(**{**accepted_params(factory, hints or {}), **params})


def _check_params(name: str, factory: Factory, params: Mapping[str, Any]) -> None:
    """NelError naming a parameter the benchmark does not declare (a user's `--param` or
    `params:` typo), instead of the TypeError its constructor would raise."""
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        declared = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return  # no signature to check against: the constructor decides
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in declared.values()):
        return
    named = [k for k, p in declared.items() if k != "self" and p.kind in
             (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    unknown = [k for k in params if k not in named]
    if unknown:
        takes = f"its parameters: {', '.join(named)}" if named else "it takes none"
        raise NelError(f"benchmark {name!r} has no parameter {unknown[0]!r} ({takes})")


def get_environment(name: str, **kwargs: Any) -> EvalEnvironment:
    """NeMo Evaluator's `get_environment`: an environment by name, file or `gym://` URL.

    Keyword arguments are offered to the constructor and kept only where it declares
    them (NeMo Evaluator passes `num_examples`/`num_fewshot` that way); `params=` holds
    the user's own parameters, which are always passed.
    """
    user = dict(kwargs.pop("params", None) or {})
    hints = {k: v for k, v in kwargs.items() if v is not None}
    return get_benchmark(name, hints=hints, **user)


def list_environments() -> list[str]:
    """All registered benchmark names (NeMo Evaluator's spelling of `list_benchmarks`)."""
    return list_benchmarks()
