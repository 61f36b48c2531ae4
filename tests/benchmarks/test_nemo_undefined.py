"""A benchmark name NeMo Evaluator 0.3.0's own examples use but define nowhere
(`research-bench`, examples 23 and walkthrough §10): nel refuses it in one line that says so,
and NeMo Evaluator 0.3.0's own run of the same config fails on it ("Unknown environment")."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo
from tests.support.realcomponents import REPO_ROOT

CONFIG = REPO_ROOT / "tests" / "fixtures" / "nemo_configs" / "examples" / "23_tool_calling_combined.yaml"


def test_nel_refuses_research_bench_in_one_line_saying_it_is_defined_nowhere(tmp_path: Path) -> None:
    p = run_nel("eval", "run", str(CONFIG), "--dry-run", "-o", str(tmp_path / "out"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "'research-bench'" in lines[0] and "define it nowhere" in lines[0]
    assert "Unknown environment 'research-bench'" in lines[0]
    assert "did you mean" not in lines[0]  # no look-alike: the config needs another name


def test_nemo_evaluators_own_run_fails_on_research_bench(tmp_path: Path) -> None:
    p = run_peer_nemo("eval", "run", str(CONFIG), "-o", str(tmp_path / "out"), timeout=180)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Unknown environment 'research-bench'" in p.stdout + p.stderr
