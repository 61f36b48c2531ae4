"""Every extractor and scorer finishes on adversarial replies far larger than real ones.

Each scorer runs in its own child process with a generous deadline: a quadratic scan or a
backtracking regex cannot be interrupted from inside Python, so only a process boundary
turns a hang into a failure that names the extractor and the input that hung. (A 56 KB
reply of unclosed `\\boxed{` once froze `nel serve` for 19 s; 350 KB pinned it for 11 min.)

Every shape runs at 256 KB (quadratic code needs minutes there); the historical shapes also
run at 1 MB. The scaling itself (time(2n)/time(n) about 2) is measured by
`bench/bench_extraction_scaling.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.adversarial_text import SCORERS, UNITS

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 60.0
SIZE = 256_000
LARGE_SIZE = 1_000_000
LARGE_SHAPES = ("boxed_open", "mixed")

_CHILD = """
import sys
from tests.support.adversarial_text import SCORERS, UNITS, adversarial
scorer, size, large, large_shapes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fn = SCORERS[scorer]
cases = [(name, size) for name in UNITS] + [(n, large) for n in large_shapes.split(",")]
for name, n in cases:
    print(f"{name}@{n}", flush=True)
    fn(adversarial(name, n))
print("done", flush=True)
"""


def test_every_shape_is_exercised() -> None:
    assert set(LARGE_SHAPES) <= set(UNITS)
    assert len(UNITS) >= 40


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_scorer_finishes_on_adversarial_input(scorer: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, scorer, str(SIZE), str(LARGE_SIZE), ",".join(LARGE_SHAPES)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
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
    lines = out.split()
    assert proc.returncode == 0, (
        f"{scorer} raised on input {lines[-1] if lines else '(none)'}: {err.strip()[-2000:]}"
    )
    assert lines[-1:] == ["done"], f"{scorer} stopped early after {lines[-1:]}"
