"""Built-in benchmarks are a lazy table: looking one up imports only its module, and what
`nel list` and `nel data` show about it (scorer family, data source) is read from its class."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks._registry import BENCHMARKS, BUILTINS, get_factory, is_builtin
from benchmarks.sources import SOURCES, Source
from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT


def _modules_after(code: str) -> list[str]:
    script = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=nel_env(None, ()), cwd=REPO_ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_one_lookup_imports_only_that_benchmark() -> None:
    mods = _modules_after("from benchmarks import get_factory; get_factory('gsm8k')")
    assert "benchmarks.builtin.gsm8k" in mods
    others = [m for m in mods if m.startswith(("benchmarks.builtin.", "benchmarks.agentic."))
              and m != "benchmarks.builtin.gsm8k"]
    assert others == []  # not mmlu, humaneval, the agent benchmarks, ...
    # importing the package (what every `nel` command does) imports no benchmark at all
    mods = _modules_after("import benchmarks")
    assert not [m for m in mods if m.startswith(("benchmarks.builtin.", "benchmarks.agentic."))]


def test_every_builtin_declares_its_scorer_family_and_sources_come_from_the_classes() -> None:
    for name in BUILTINS:
        factory = get_factory(name)
        assert isinstance(getattr(factory, "scorer_family", None), str), name
    assert set(SOURCES) == {n for n in BUILTINS if isinstance(getattr(get_factory(n), "source", None), Source)}
    assert SOURCES["gsm8k"] is get_factory("gsm8k").source and SOURCES["gsm8k"].n_items == 1319
    assert {"gsm8k", "mmlu", "humaneval", "xstest"} <= set(SOURCES)


class _Tiny:
    """A stand-in built-in: what `nel list` shows comes from these attributes."""

    name = "tiny_builtin"
    scorer_family = "exact-tiny"
    source = Source("tiny_builtin", (), 3, "a test table", "org/tiny", "main", "MIT")


class _NoFamily:
    name = "no_family"


def test_nel_list_reads_type_and_source_from_the_class(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from dagster_project.cli import commands_list

    target = f"{__name__}:_Tiny"
    monkeypatch.setitem(BUILTINS, "tiny_builtin", target)
    monkeypatch.setitem(BUILTINS, "no_family", f"{__name__}:_NoFamily")
    BENCHMARKS.add("tiny_builtin", target)
    BENCHMARKS.add("no_family", f"{__name__}:_NoFamily")
    try:
        assert is_builtin("tiny_builtin")
        rows = {r.split()[0]: r for r in commands_list._builtin_rows()}
    finally:
        del BENCHMARKS["tiny_builtin"]
        del BENCHMARKS["no_family"]
    assert "type=exact-tiny" in rows["tiny_builtin"] and "source=hf:org/tiny" in rows["tiny_builtin"]
    # a built-in that forgot its family is not passed off as a BYOB benchmark
    assert "type=unspecified" in rows["no_family"] and "byob" not in rows["no_family"]


def test_register_at_run_time_still_adds_benchmarks() -> None:
    from benchmarks import register
    from benchmarks._registry import registered_at_run_time

    @register("runtime_added_bench")
    class RuntimeAdded:
        pass

    try:
        assert get_factory("runtime_added_bench") is RuntimeAdded
        assert RuntimeAdded.name == "runtime_added_bench"  # type: ignore[attr-defined]
        assert "runtime_added_bench" in registered_at_run_time()
        assert not is_builtin("runtime_added_bench")
        assert get_factory("RUNTIME_ADDED_BENCH") is RuntimeAdded  # case-insensitive, as NeMo Evaluator
    finally:
        del BENCHMARKS["runtime_added_bench"]
