"""`nel validate -b humaneval --sandbox local`: the gold self-consistency check of a code
benchmark from the CLI, each answer run with its tests in a real bubblewrap sandbox."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_nel


def test_gold_passes_and_wrong_gold_fails_in_a_local_sandbox(bwrap: None, data_dir: Path) -> None:
    gold = run_nel("validate", "-b", "humaneval", "-s", "5", "--sandbox", "local", "--json", timeout=300)
    assert gold.returncode == 0, gold.stderr
    assert json.loads(gold.stdout) | {"failures": []} == {
        "benchmark": "humaneval", "n": 164, "checked": 5, "passed": 5, "skipped": 0,
        "wrong": False, "failures": []}
    wrong = run_nel("validate", "-b", "humaneval", "-s", "5", "--sandbox", "local", "--wrong", "--json",
                    timeout=300)
    assert wrong.returncode == 0, wrong.stderr
    out = json.loads(wrong.stdout)
    assert (out["checked"], out["passed"], out["wrong"]) == (5, 5, True)


def test_validate_without_a_sandbox_says_to_add_one(data_dir: Path) -> None:
    proc = run_nel("validate", "-b", "humaneval", "-s", "2", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "`--sandbox local`" in lines[0], lines
