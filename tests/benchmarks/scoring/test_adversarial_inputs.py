"""Every extractor and scorer finishes on adversarial replies far larger than real ones.

Each scorer runs in its own child process with a generous deadline: a quadratic scan or a
backtracking regex cannot be interrupted from inside Python, so only a process boundary
turns a hang into a failure that names the extractor and the input that hung. (A 56 KB
reply of unclosed `\\boxed{` once froze `nel serve` for 19 s; 350 KB pinned it for 11 min.)

Every shape runs at 256 KB (quadratic code needs minutes there); the historical shapes also
run at 1 MB. Memory is bounded too: every shape runs again at 32 KB under tracemalloc (which
slows allocation-heavy code ~10x), and each call's peak must stay within a small multiple
of the input's length (copying every level of `\\boxed{\\boxed{...}}` once took
1.4 GB for 140 KB). The scaling itself (time(2n)/time(n) about 2) is measured by
`bench/bench_extraction_scaling.py`.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from bench.support.adversarial_text import NESTS, SCORERS, SHAPES, UNITS

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 90.0
SIZE = 256_000
MEMORY_SIZE = 32_000
LARGE_SIZE = 1_000_000
LARGE_SHAPES = ("boxed_open", "mixed", "nest_boxed")
# A call may allocate at most this many bytes per input character, plus a constant for
# compiled regexes and caches. Linear code peaks at ~35 here (token lists); copying each
# nested level peaks in the thousands at these sizes, and grows with them.
PEAK_BYTES_PER_CHAR = 48
PEAK_CONSTANT_BYTES = 4_000_000
# The child may not map more than this: copying every level of a 1 MB nest needs ~70 GB,
# and a regression must fail here, not take the machine's memory.
ADDRESS_SPACE_CAP = 3_000_000_000


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))

_CHILD = """
import sys, tracemalloc
from bench.support.adversarial_text import SCORERS, SHAPES, adversarial
scorer, size, large, large_shapes, memory_size = sys.argv[1:6]
fn = SCORERS[scorer]
fn("warm up 42")  # imports and caches (sympy's parser) are not the input's cost
cases = [(name, int(size)) for name in SHAPES] + [(n, int(large)) for n in large_shapes.split(",")]
for name, n in cases:
    print(f"{name}@{n}", flush=True)
    fn(adversarial(name, n))
for name in SHAPES:
    text = adversarial(name, int(memory_size))
    print(f"memory:{name}@{len(text)}", flush=True)
    tracemalloc.start()
    fn(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"peak {len(text)} {peak}", flush=True)
print("done", flush=True)
"""


def test_every_shape_is_exercised() -> None:
    assert set(LARGE_SHAPES) <= set(SHAPES)
    assert len(UNITS) >= 40
    # Nesting of every delimiter an extractor matches: boxes, braces, fractions,
    # parentheses, reasoning tags, code fences.
    for nest in ("nest_boxed", "nest_fbox", "nest_braces", "nest_frac", "nest_parens",
                 "nest_think", "nest_fence"):
        assert nest in NESTS


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_scorer_finishes_on_adversarial_input(scorer: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, scorer, str(SIZE), str(LARGE_SIZE), ",".join(LARGE_SHAPES),
         str(MEMORY_SIZE)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_cap_memory,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        started = out.split()
        pytest.fail(
            f"{scorer} did not finish within {DEADLINE_S:.0f} s: it hung on input "
            f"{started[-1] if started else '(none started)'}"
        )
    lines = out.splitlines()
    assert proc.returncode == 0, (
        f"{scorer} raised on input {lines[-1] if lines else '(none)'}: {err.strip()[-2000:]}"
    )
    assert lines[-1:] == ["done"], f"{scorer} stopped early after {lines[-1:]}"
    over = []
    memory = [line for line in lines if line.startswith(("memory:", "peak "))]
    for case, measured in zip(memory[0::2], memory[1::2], strict=True):
        _, length, peak = measured.split()
        if int(peak) > PEAK_BYTES_PER_CHAR * int(length) + PEAK_CONSTANT_BYTES:
            over.append(f"{case}: {int(peak) / 1e6:.1f} MB for {int(length) / 1e3:.0f} KB")
    assert not over, f"{scorer} is not linear in memory on: {'; '.join(over)}"
