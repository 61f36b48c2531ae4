"""Code extraction and program assembly (`benchmarks.scoring.code`): the answer shapes real
models produce, each run with real Python (a plain subprocess, no sandbox: the sandboxed
runs are in tests/benchmarks/builtin/test_humaneval_gold.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchmarks.scoring.code import (
    PYTHON_CMD,
    answer_module,
    extract_code,
    harness_input,
    judge_run,
    new_sentinel,
    program_for,
)
from tests.support.code_attacks import ATTACKS, attack_answer

PROMPT = '''from typing import List


def add_all(xs: List[int]) -> int:
    """Sum of xs.
    >>> add_all([1, 2])
    3
    """
'''
TEST = '''

def check(candidate):
    assert candidate([1, 2]) == 3
    assert candidate([]) == 0
'''
EP = "add_all"
FULL = "def add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"


def run(code: str, sentinel: str = "nel-tests-done-x") -> subprocess.CompletedProcess[str]:
    """The model's `code` for PROMPT under the scorer's harness (the tests in one process,
    the answer in another), with plain Python (no sandbox)."""
    stdin = harness_input(prompt=PROMPT, answer=answer_module(PROMPT, code, EP), tests=TEST,
                          entry_point=EP, sentinel=sentinel)
    p = subprocess.run([sys.executable, *PYTHON_CMD[1:]], input=stdin, capture_output=True,
                       timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(), p.stderr.decode())


def passes(response: str) -> bool:
    ext = extract_code(response, EP)
    assert ext.code is not None, response
    sentinel = new_sentinel()
    p = run(ext.code, sentinel)
    return judge_run(p.returncode, None, p.stderr, stdout=p.stdout, sentinel=sentinel).passed


@pytest.mark.parametrize(("response", "method"), [
    (f"```python\n{FULL}```", "fence_entry_point"),
    (f"```\n{FULL}```", "fence_entry_point"),
    (f"```py\n{FULL}```", "fence_entry_point"),
    (f"Here is the implementation:\n\n```python\n{FULL}```\n\nIt loops once over xs.", "fence_entry_point"),
    (f"~~~python\n{FULL}~~~", "fence_entry_point"),
    # cut at the token limit: the fence never closes
    (f"Sure.\n```python\n{FULL}", "fence_entry_point"),
    # an unfenced function inside prose
    (f"Here you go:\n\n{FULL}\nThis is O(n).", "function"),
    # the function only, as a completions endpoint or a terse model answers
    (FULL, "function"),
])
def test_whole_function_shapes(response: str, method: str) -> None:
    ext = extract_code(response, EP)
    assert ext.method == method and ext.source == "content"
    assert passes(response)


def test_several_blocks_pick_the_one_defining_the_entry_point() -> None:
    response = (f"First a helper test:\n```python\nprint(add_all([1]))\n```\nThe solution:\n"
                f"```python\n{FULL}```\nAnd how to run it:\n```bash\npython sol.py\n```\n")
    ext = extract_code(response, EP)
    assert ext.method == "fence_entry_point" and ext.n_blocks == 3
    assert "def add_all" in (ext.code or "")
    assert passes(response)


def test_several_blocks_without_the_entry_point_take_the_last_python_one() -> None:
    response = "```python\n    return -1\n```\nOops, fixed:\n```python\n    return sum(xs)\n```\n```text\n3\n```"
    ext = extract_code(response, EP)
    assert ext.method == "fence_last" and ext.code == "    return sum(xs)"
    assert passes(response)


def test_a_later_wrong_definition_wins_over_an_earlier_right_one() -> None:
    # The last stated answer is the answer, as for every other scorer.
    response = f"```python\n{FULL}```\nActually:\n```python\ndef add_all(xs):\n    return 0\n```"
    assert not passes(response)


@pytest.mark.parametrize("body", [
    "    return sum(xs)",                                      # indented as in the file
    "return sum(xs)",                                         # flush left
    "total = 0\n    for x in xs:\n        total += x\n    return total",  # first line stripped
    "\ttotal = 0\n\tfor x in xs:\n\t\ttotal += x\n\treturn total",   # tabs
    "        total = 0\n        for x in xs:\n            total += x\n        return total",  # too deep
    "for x in []:\n    pass\nreturn sum(xs)",                 # flush-left block
])
def test_body_only_is_reindented_under_the_signature(body: str) -> None:
    for response in (body, f"```python\n{body}\n```"):
        assert passes(response), response


def test_a_raw_continuation_stops_at_the_next_top_level_line() -> None:
    # A completions endpoint keeps writing after the body (a new def, example calls).
    # The eval loop strips the answer, so the body's first line arrives at column 0.
    response = "    total = 0\n    return sum(xs)\n\n\ndef main():\n    print(add_all([1, 2]))\n\nmain()\ninput()\n"
    ext = extract_code(response, EP)
    assert ext.method == "body" and ext.code is not None and ext.code.startswith("total")
    program = program_for(PROMPT, ext.code, TEST, EP)
    assert "input()" not in program and run(ext.code).returncode == 0


def test_a_main_guard_does_not_run_with_the_tests() -> None:
    response = f"```python\n{FULL}\nif __name__ == \"__main__\":\n    input()\n    raise SystemExit(3)\n```"
    code = extract_code(response, EP).code or ""
    assert "__main__" not in program_for(PROMPT, code, TEST, EP) and run(code).returncode == 0


def test_imports_from_the_prompt_and_the_answer_both_reach_the_program() -> None:
    response = ("```python\nimport math\n\ndef add_all(xs: List[int]) -> int:\n"
                "    return int(math.fsum(xs))\n```")
    assert passes(response)  # `List` comes from the prompt, `math` from the answer


def test_think_blocks_are_stripped_and_used_only_when_the_answer_has_no_code() -> None:
    decoy = "<think>Maybe\n```python\ndef add_all(xs):\n    return 0\n```\nno.</think>"
    ext = extract_code(f"{decoy}\n```python\n{FULL}```", EP)
    assert ext.source == "content" and passes(f"{decoy}\n```python\n{FULL}```")
    only = extract_code(f"<think>```python\n{FULL}```</think>", EP)
    assert only.source == "reasoning" and only.method == "fence_entry_point"
    sep = extract_code("", EP, reasoning=f"```python\n{FULL}```")
    assert sep.source == "reasoning" and sep.code is not None


@pytest.mark.parametrize("response", ["", "   ", "I cannot help with that.",
                                      "The function should add the numbers together."])
def test_no_code_is_no_extraction(response: str) -> None:
    ext = extract_code(response, EP)
    assert ext.code is None and ext.method == "none"


def test_extraction_is_linear_on_hostile_input() -> None:
    # Many unclosed fences, many defs: each scan is line by line.
    hostile = ("```python\n" * 20000) + ("def add_all(\n" * 20000) + ("<think>" * 20000)
    t = time.process_time()
    extract_code(hostile, EP)
    program_for(PROMPT, hostile, TEST, EP)
    # a bound on CPU work, not on wall time: generous enough for any machine, far below what
    # a quadratic scan of 560 KB would need
    assert time.process_time() - t < 20


@pytest.mark.parametrize(("rc", "stopped", "stderr", "reason", "exc"), [
    (0, None, "", "passed", None),
    (1, None, "Traceback (most recent call last):\n  File \"<stdin>\", line 9\nAssertionError\n",
     "assertion", "AssertionError"),
    (1, None, "  File \"<stdin>\", line 3\n    def f(:\n          ^\nSyntaxError: invalid syntax\n",
     "syntax_error", "SyntaxError"),
    (1, None, "IndentationError: unexpected indent\n", "syntax_error", "IndentationError"),
    (1, None, "Traceback:\nMemoryError\n", "memory", "MemoryError"),
    (1, None, "Traceback:\nNameError: name 'x' is not defined\n", "exception", "NameError"),
    (-9, "timeout", "", "timeout", None),
    (137, "memory", "", "memory", None),
    (-9, None, "", "killed", None),
    (3, None, "", "exit_status", None),
    (0, "output_limit", "", "output_limit", None),  # stopped by a limit never passes
])
def test_run_outcomes_are_classified(rc: int, stopped: str | None, stderr: str, reason: str,
                                     exc: str | None) -> None:
    v = judge_run(rc, stopped, stderr)
    assert v.reason == reason and v.exception == exc and v.passed == (reason == "passed")


def test_real_failures_are_classified_from_real_runs() -> None:
    wrong, broken, raising = "    return 0", "    return sum(xs", "    return undefined_name"
    for code, reason in ((wrong, "assertion"), (broken, "syntax_error"), (raising, "exception")):
        p = run(code)
        assert judge_run(p.returncode, None, p.stderr).reason == reason, p.stderr


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_answer_that_ends_before_the_tests_never_passes(attack: str) -> None:
    """Exit 0 before the tests, a forged sentinel, a patched print: never a pass."""
    ext = extract_code(attack_answer(attack, EP), EP)
    assert ext.code is not None
    sentinel = new_sentinel()
    p = run(ext.code, sentinel)
    v = judge_run(p.returncode, None, p.stderr, stdout=p.stdout, sentinel=sentinel)
    assert not v.passed, (attack, p.returncode, p.stdout[-500:], p.stderr[-500:])
    assert sentinel not in p.stdout


def test_the_sentinel_is_per_run_and_a_right_answer_prints_it_last() -> None:
    assert new_sentinel() != new_sentinel()
    sentinel = new_sentinel()
    p = run("print('hi')\n" + FULL, sentinel)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == sentinel, p
    assert judge_run(0, None, "", stdout=p.stdout, sentinel=sentinel).passed
    # exit 0 without it: the program ended before its tests did
    v = judge_run(0, None, "", stdout="hi\n", sentinel=sentinel)
    assert (v.passed, v.reason) == (False, "tests_not_finished")


def test_an_answer_equal_to_everything_does_not_pass() -> None:
    """Only plain data crosses from the answer's process to the tests'."""
    from tests.support.code_attacks import always_equal_answer

    ext = extract_code(always_equal_answer(EP), EP)
    assert ext.code is not None
    sentinel = new_sentinel()
    p = run(ext.code, sentinel)
    v = judge_run(p.returncode, None, p.stderr, stdout=p.stdout, sentinel=sentinel)
    assert not v.passed and "cannot be compared by the tests" in p.stderr


def test_values_cross_between_the_processes_faithfully() -> None:
    """inf, nan, nested containers, bytes, sets and exceptions reach the tests as they are."""
    prompt = "def echo(x):\n    pass\n"
    tests = ("import math\n"
             "def check(candidate):\n"
             "    for v in [None, True, 3, -2.5, float('inf'), 1j, 'é', b'\\x00', [1, (2, {3})],"
             " {'a': [float('-inf')]}, frozenset({1})]:\n"
             "        assert candidate(v) == v and type(candidate(v)) is type(v), v\n"
             "    assert math.isnan(candidate(float('nan')))\n"
             "    try:\n        candidate('boom')\n    except ValueError as e:\n"
             "        assert 'boom' in str(e)\n    else:\n        raise AssertionError('no raise')\n")
    answer = answer_module(prompt, "def echo(x):\n    if x == 'boom':\n"
                           "        raise ValueError('boom')\n    return x\n", "echo")
    stdin = harness_input(prompt=prompt, answer=answer, tests=tests, entry_point="echo",
                          sentinel="done-1")
    p = subprocess.run([sys.executable, *PYTHON_CMD[1:]], input=stdin, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout.decode().splitlines()[-1] == "done-1", p.stderr.decode()
