"""The scorers load on first use: registering the benchmarks compiles none of their regexes."""

from __future__ import annotations

import subprocess
import sys

SCORERS = ["drop", "extract", "math_equiv", "mcq", "numeric", "reasoning", "refusal", "text"]


def _loaded_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(m for m in sys.modules "
         "if m.startswith('benchmarks.scoring.'))))"],
        capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_registering_the_benchmarks_loads_no_scorer() -> None:
    loaded = _loaded_after("import benchmarks, benchmarks.builtin\n"
                           "from benchmarks import list_benchmarks\nassert 'gsm8k' in list_benchmarks()")
    assert not [m for m in loaded if m.rsplit(".", 1)[1] in SCORERS], loaded


def test_names_resolve_on_first_use() -> None:
    import benchmarks.scoring as scoring
    from benchmarks.scoring.math_equiv import math_equiv as the_function

    assert scoring.numeric_match("#### 7", "7").reward == 1.0
    assert scoring.looks_like_refusal("I can't help with that.")
    # The submodule of the same name never hides the function (as when imported eagerly).
    assert scoring.math_equiv is the_function
    assert set(scoring.__all__) <= set(dir(scoring))
    for name in scoring.__all__:
        assert getattr(scoring, name) is not None
