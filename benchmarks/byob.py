"""Bring your own benchmark: a dataset, a prompt and a scorer function become a registered
benchmark in a few lines, with the decorator API of NeMo Evaluator 0.3.0.

    from benchmarks.byob import ScorerInput, benchmark, exact_match, scorer

    @benchmark(name="capitals", dataset="capitals.jsonl",
               prompt="What is the capital of {country}? Answer with the city only.",
               target_field="capital")
    @scorer
    def check(sample: ScorerInput) -> dict:
        return exact_match(sample)

A file written for NeMo Evaluator (`from nemo_evaluator import benchmark, scorer, ...`)
runs unchanged: nel's module loader serves those import paths from this module (see
`benchmarks/nemo_imports.py`). Then `nel eval run --bench ./file.py`, a config's
`module: file.py`, `nel serve -b ./file.py` or `nel validate -b ./file.py`.

A scorer returns a bool, a number in [0, 1], a dict with `correct`, `reward` or `score`
(looked up in that order, as NeMo Evaluator does; `extracted` is the extracted answer and
other keys become scoring details), or a VerifyResult; it may be async.

Deliberate differences from NeMo Evaluator 0.3.0 (each one makes a wrong score loud or
right; the README lists them): a dict without `correct`/`reward`/`score` is an error
instead of "the first value"; a prompt field missing from a row is an error instead of
sending the unformatted template; `answer_line`/`multichoice_regex` take the *last*
match (a model's final answer) and do not fall back to the last line; `fuzzy_match` never
scores an empty response.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult, VerifyResult
from benchmarks.datasets import load_records
from benchmarks.errors import NelError

# A user pattern is matched against at most this much of the response's tail: the final
# answer is at the end, and a pathological pattern then costs a bounded time.
_PATTERN_WINDOW = 20_000


@dataclass(slots=True)
class ScorerInput:
    """What a BYOB scorer sees for one sample (NeMo Evaluator's `ScorerInput`).

    Attributes:
        response: The model's answer text (reasoning stripped).
        target: The gold answer (`target_field` of the row, as a string).
        metadata: The whole dataset row plus `idx`, `source` and `benchmark`.
        config: The `extra` settings of `@benchmark` (and its extra keyword arguments).
        sandbox: The benchmark's sandbox, started, when it has a `sandbox:` block (else None).
        reasoning: The model's separate reasoning, if any (a nel addition).
    """

    response: str
    target: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    sandbox: Any = None
    reasoning: str | None = None


ScorerFn = Callable[[ScorerInput], Any]


def scorer(fn: ScorerFn) -> ScorerFn:
    """Mark a function as a BYOB scorer (sync or async, taking a ScorerInput)."""
    fn.__nel_scorer__ = True  # type: ignore[attr-defined]
    fn._is_scorer = True  # type: ignore[attr-defined]  # NeMo Evaluator's marker
    return fn


def _verdict(v: VerifyResult) -> dict[str, Any]:
    return {"correct": v.reward >= 1.0, "extracted": v.extracted_answer, **v.scoring_details}


# The built-in scorers below import their scoring module when first called: `benchmarks`
# is imported by every run, and most runs use none of them.


def exact_match(sample: ScorerInput, *, normalize: bool = True) -> dict[str, Any]:
    """Normalised exact match of the response against the target."""
    from benchmarks.scoring.text import exact_match as _exact_match

    return _verdict(_exact_match(sample.response, str(sample.target), reasoning=sample.reasoning,
                                 normalize=normalize))


def _last_match(pattern: str, text: str) -> str | None:
    """Group 1 (or the whole match) of the last match of `pattern` in the text's tail."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise NelError(f"scorer pattern {pattern!r} is not a valid regular expression: {exc}") from None
    last: re.Match[str] | None = None
    for match in rx.finditer(text[-_PATTERN_WINDOW:]):
        last = match
    if last is None:
        return None
    return (last.group(1) if rx.groups else last.group(0)).strip()


def _pattern_verdict(sample: ScorerInput, pattern: str, compare: Callable[[str, str], bool]) -> dict[str, Any]:
    extracted = _last_match(pattern, sample.response or "")
    ok = extracted is not None and compare(extracted, str(sample.target))
    return {"correct": ok, "extracted": extracted, "method": "pattern" if extracted else "none",
            "pattern": pattern}


def answer_line(sample: ScorerInput, pattern: str | None = None, *,
                prefix: str = "Answer:") -> dict[str, Any]:
    """Compare the answer after the last `Answer:` line with the target.

    Args:
        sample: The scorer input.
        pattern: A regular expression whose group 1 is the answer (NeMo Evaluator's
            `pattern=`); the last match counts. Default: nel's `Answer:` extraction.
        prefix: The answer marker when no `pattern` is given.
    """
    from benchmarks.scoring.text import answer_line as _answer_line
    from benchmarks.scoring.text import normalize_text

    if pattern is not None:
        return _pattern_verdict(sample, pattern,
                                lambda a, b: bool(normalize_text(a)) and normalize_text(a) == normalize_text(b))
    return _verdict(_answer_line(sample.response, str(sample.target), reasoning=sample.reasoning,
                                 prefix=prefix))


def multichoice_regex(sample: ScorerInput, pattern: str | None = None) -> dict[str, Any]:
    """Compare the chosen option letter with the target letter.

    Args:
        sample: The scorer input.
        pattern: A regular expression whose group 1 is the letter (NeMo Evaluator's
            `pattern=`, e.g. `(?i)Answer\\s*:\\s*([A-D])`); the last match counts. Default:
            nel's multiple-choice extraction (`Answer: B`, `(B)`, `\\boxed{B}`, ...).
    """
    from benchmarks.scoring.mcq import multichoice_regex as _multichoice_regex

    if pattern is not None:
        return _pattern_verdict(sample, pattern, lambda a, b: a.upper() == b.strip().upper())
    return _verdict(_multichoice_regex(sample.response, str(sample.target), reasoning=sample.reasoning))


def numeric_match(sample: ScorerInput) -> dict[str, Any]:
    """Compare the final number in the response with the target number."""
    from benchmarks.scoring.numeric import numeric_match as _numeric_match

    return _verdict(_numeric_match(sample.response, str(sample.target), reasoning=sample.reasoning))


def fuzzy_match(sample: ScorerInput) -> dict[str, Any]:
    """Containment either way, after normalisation, against the target or its aliases.

    Aliases come from `metadata["correct_answers"]`, as in NeMo Evaluator. An empty
    response never matches (NeMo Evaluator 0.3.0 scores it correct: "" is in every string).
    """
    from benchmarks.scoring.text import normalize_text

    pred = normalize_text(sample.response or "")
    aliases = sample.metadata.get("correct_answers") or [str(sample.target)]
    if isinstance(aliases, str):
        aliases = [aliases]
    golds = [g for g in (normalize_text(str(a)) for a in aliases) if g]
    ok = bool(pred) and any(g in pred or pred in g for g in golds)
    return {"correct": ok, "extracted": (sample.response or "").strip()[:200], "method": "fuzzy"}


def _to_verify(result: Any) -> VerifyResult:
    if isinstance(result, VerifyResult):
        return result
    if isinstance(result, bool):
        return VerifyResult(1.0 if result else 0.0, None, {"method": "byob"})
    if isinstance(result, int | float):
        return VerifyResult(float(result), None, {"method": "byob"})
    if isinstance(result, dict):
        # The scorer's whole dict stays the scoring details, as NeMo Evaluator records it
        # (its reports group results by such fields, e.g. `correct`).
        details = dict(result)
        # NeMo Evaluator's precedence: `correct`, then `reward` (then nel's `score`).
        if "correct" in details:
            reward = float(details["correct"])
        elif "reward" in details:
            reward = float(details["reward"])
        elif "score" in details:
            reward = float(details["score"])
        else:
            raise NelError("a BYOB scorer's dict must hold `correct`, `reward` or `score` "
                           f"(it held {', '.join(map(repr, details)) or 'nothing'})")
        extracted = details.get("extracted")
        details.setdefault("method", "byob")
        return VerifyResult(reward, None if extracted is None else str(extracted), details)
    raise NelError(f"a BYOB scorer returned {type(result).__name__}; return a bool, a number, "
                   "a dict with `correct`/`reward`/`score`, or a VerifyResult")


def _source_id(obj: Any) -> str:
    """Stable text for a callable (its source) or a value, for the results fingerprint."""
    if callable(obj):
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            return getattr(obj, "__qualname__", repr(obj))
    return repr(obj)


def benchmark(
    name: str,
    dataset: str | Sequence[dict[str, Any]] | Callable[..., list[dict[str, Any]]],
    prompt: str | Callable[[dict[str, Any]], str] = "",
    target_field: str = "target",
    endpoint_type: str = "chat",
    system_prompt: str | None = None,
    field_mapping: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    requirements: list[str] | None = None,
    prepare_row: Callable[[dict[str, Any], int, random.Random], dict[str, Any]] | None = None,
    seed_fn: Callable[[dict[str, Any], int], SeedResult] | None = None,
    *,
    system: str | None = None,
    category_field: str | None = None,
    cluster_field: str | None = None,
    version: str = "1",
    **kwargs: Any,
) -> Callable[[ScorerFn], ScorerFn]:
    """Register a benchmark built from a dataset, a prompt template and a scorer.

    The parameters up to `seed_fn` are NeMo Evaluator 0.3.0's, in its order; the
    keyword-only ones after them are nel's. Returns the scorer unchanged (as NeMo
    Evaluator does); the environment class is `scorer_fn.environment`.

    Args:
        name: Registry name (`nel eval run -b NAME`).
        dataset: A local JSONL/CSV/Parquet path (relative paths are tried against the
            current directory, then the defining module's folder), an `hf://` URI, rows,
            or a function returning rows.
        prompt: A `str.format` template over the row's fields (a `.txt`/`.md`/`.jinja`
            file path is read first), or a function of the row.
        target_field: The row field holding the gold answer (default `target`).
        endpoint_type: `chat` or `completion`; as in NeMo Evaluator, a config's service
            `protocol` decides what is sent, this records what the benchmark expects.
        system_prompt: A system message for every problem.
        field_mapping: `{source: alias}`: the prompt may also use `{alias}`.
        extra: Settings passed to the scorer as `sample.config` (with `**kwargs`).
        requirements: Python packages the benchmark needs (`nel package` installs them).
        prepare_row: `(row, idx, rng) -> row`, applied once after loading; `rng` is one
            `random.Random(42)` shared in row order, as in NeMo Evaluator.
        seed_fn: `(row, idx) -> SeedResult`, replacing the prompt template.
        system: nel's older spelling of `system_prompt`.
        category_field: Row field used as the category (per-category scores).
        cluster_field: Row field used as the cluster (clustered standard errors).
        version: Bump when the prompt or scorer changes meaning (stored results go stale).
    """
    if system is not None and system_prompt is not None and system != system_prompt:
        raise NelError(f"@benchmark({name!r}): give `system_prompt` or `system`, not both")
    sys_prompt = system_prompt if system_prompt is not None else system
    if endpoint_type not in ("chat", "completion", "completions"):
        raise NelError(f"@benchmark({name!r}): endpoint_type must be 'chat' or 'completion', "
                       f"not {endpoint_type!r}")
    config = {**(extra or {}), **kwargs}
    mapping = dict(field_mapping or {})

    def deco(fn: ScorerFn) -> ScorerFn:
        if not callable(fn):
            raise NelError(f"@benchmark({name!r}) must decorate a scorer function")
        module_dir = Path(inspect.getfile(fn)).resolve().parent
        template = prompt
        if isinstance(template, str) and template.endswith((".txt", ".md", ".jinja")):
            for base in (Path.cwd(), module_dir):
                if (base / template).is_file():
                    template = (base / template).read_text(encoding="utf-8")
                    break
        digest = hashlib.sha256("\0".join(
            _source_id(x) for x in (template, target_field, sys_prompt, fn, mapping, config,
                                    prepare_row, seed_fn)).encode()).hexdigest()[:12]

        def load() -> list[dict[str, Any]]:
            if callable(dataset):
                rows = dataset()
            elif not isinstance(dataset, str):
                rows = [dict(r) for r in dataset]
            elif dataset.startswith("hf://") or Path(dataset).expanduser().exists():
                rows = load_records(dataset)
            else:
                rows = load_records(module_dir / dataset)
            if prepare_row is not None:
                rng = random.Random(42)
                rows = [prepare_row(dict(r), i, rng) for i, r in enumerate(rows)]
            return [dict(r) for r in rows]

        class ByobBenchmark(DatasetEnvironment):
            __doc__ = f"BYOB benchmark {name!r} (scorer {fn.__qualname__})."

            def __init__(self, *, protocol: str = "chat", num_fewshot: int | None = None) -> None:
                super().__init__(protocol=protocol, num_fewshot=num_fewshot)
                self.rows = load()
                if seed_fn is None:
                    missing = [i for i, r in enumerate(self.rows) if target_field not in r]
                    if missing:
                        raise NelError(f"{name}: row {missing[0]} has no field {target_field!r} "
                                       f"(fields: {', '.join(sorted(self.rows[missing[0]]))})")
                self._dataset = self.rows
                self._finish_init()

            def fingerprint(self) -> str:
                return f"{super().fingerprint()}:{digest}"

            def build_seed(self, row: dict[str, Any], idx: int) -> SeedResult:
                if seed_fn is not None:
                    seed = seed_fn(row, idx)
                    if not isinstance(seed, SeedResult):
                        raise NelError(f"{name}: seed_fn returned {type(seed).__name__}, "
                                       "not a SeedResult")
                    return seed
                data = dict(row)
                for src, alias in mapping.items():
                    if src in data:
                        data[alias] = data[src]
                try:
                    text = template(data) if callable(template) else template.format(**data)
                except KeyError as exc:
                    raise NelError(f"{name}: prompt field {exc} is not in row {idx}") from None
                meta = {"source": "byob", "benchmark": name, **row, "idx": idx}
                if category_field:
                    meta["category"] = row.get(category_field)
                if cluster_field:
                    meta["cluster"] = row.get(cluster_field)
                return SeedResult(text, str(row[target_field]), meta, system=sys_prompt)

            def gold_response(self, seed: SeedResult) -> str:
                return seed.expected_answer

            async def verify(self, response: str, expected: str, *, sandbox: Any = None,
                             **metadata: Any) -> VerifyResult:
                inp = ScorerInput(response=response, target=expected, metadata=metadata,
                                  config=config, sandbox=sandbox, reasoning=metadata.get("reasoning"))
                out = fn(inp)
                if inspect.isawaitable(out):
                    out = await out
                return _to_verify(out)

        ByobBenchmark.name = name
        ByobBenchmark.version = version
        ByobBenchmark.endpoint_type = endpoint_type  # type: ignore[attr-defined]
        ByobBenchmark.requirements = list(requirements or [])  # type: ignore[attr-defined]
        ByobBenchmark.__qualname__ = f"ByobBenchmark[{name}]"
        register(name)(ByobBenchmark)
        fn.environment = ByobBenchmark  # type: ignore[attr-defined]
        return fn

    return deco


__all__ = ["ScorerInput", "answer_line", "benchmark", "exact_match", "fuzzy_match",
           "multichoice_regex", "numeric_match", "scorer"]
