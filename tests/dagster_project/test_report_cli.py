"""`nel eval report` / `nel report` in every format, and `nel eval merge` on real shard outputs."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from tests.dagster_project.conftest import TWO_MODEL_RUN_GROUP
from tests.dagster_project.test_compare_gate_cli import paired_patterns, start_servers, write_config
from tests.support.cli import run_nel, summary_json
from tests.support.realcomponents import require_real_component

N = 90
pytestmark = pytest.mark.xdist_group(TWO_MODEL_RUN_GROUP)


def make_two_model_run(tmp: Path, data_dir: Path, n: int = N) -> Path:
    """`base` and `worse` on the first ``n`` GSM8K items (one output dir), plus a
    ``regression.json`` from `nel compare`; returns the output dir."""
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:n]
    pats = paired_patterns(n, base_right=int(0.7 * n), changes={"worse": (n // 6, 2)})
    urls, procs = start_servers(rows, pats)
    try:
        cfg = write_config(tmp / "cfg.yaml", urls, tmp / "out", n=n)
        summary_json(run_nel("eval", "run", str(cfg), "--json", "--no-progress",
                             env={"NEL_DATA_DIR": str(data_dir)}))
    finally:
        for p in procs:
            p.stop()
    out = tmp / "out"
    p = run_nel("compare", str(out), str(out), "--baseline-model", "base", "--candidate-model", "worse",
                "-o", str(tmp / "regression.json"))
    # "worse" regresses: strict by default (as NeMo Evaluator), that BLOCK exits 1
    assert p.returncode == 1 and "BLOCK" in p.stdout, p.stdout + p.stderr
    return out


@pytest.fixture
def run_dir(two_model_run: Path) -> Path:
    """The session's two-model run (tests/dagster_project/conftest.py), shared with the
    HTML report's browser test."""
    return two_model_run


def ok(*args: str, code: int = 0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    p = run_nel(*args, env=env)
    assert p.returncode == code, f"exit {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def test_every_format(run_dir: Path, tmp_path: Path) -> None:
    reg = run_dir.parent / "regression.json"
    md = ok("eval", "report", str(run_dir)).stdout
    assert "| gsm8k | base |" in md and "| gsm8k | worse |" in md
    md = ok("eval", "report", str(run_dir), "--comparison", str(reg)).stdout
    assert "## Comparison: worse vs baseline base" in md
    rows = list(csv.DictReader(io.StringIO(ok("eval", "report", str(run_dir), "-f", "csv").stdout)))
    assert {r["model"] for r in rows} == {"base", "worse"}
    base = next(r for r in rows if r["model"] == "base" and r["category"] == "")
    assert float(base["mean"]) == pytest.approx(int(0.7 * N) / N) and int(base["n_items"]) == N
    doc = json.loads(ok("eval", "report", str(run_dir), "-f", "json", "--comparison", str(reg)).stdout)
    assert len(doc["bundles"]) == 2 and doc["comparison"]["benchmarks"]["gsm8k"]["n_paired"] == N
    tex = ok("eval", "report", str(run_dir), "-f", "latex", "-m", "base").stdout
    assert tex.count(r"\begin{tabular}") == 1 and r"\end{tabular}" in tex and "base" in tex
    # --all-formats writes one file per format
    ok("eval", "report", str(run_dir), "--all-formats", "-o", str(tmp_path / "all"), "--comparison", str(reg))
    names = sorted(p.name for p in (tmp_path / "all").iterdir())
    assert names == ["report.csv", "report.html", "report.json", "report.md", "report.tex"]
    html = (tmp_path / "all" / "report.html").read_text()
    assert html.count('class="nel-plot"') >= 5 and 'data-plot="forest"' in html
    assert not re.search(r"""(src|href)=["']https?://""", html)  # self-contained
    # `nel report` defaults to HTML across benchmarks
    ok("report", str(run_dir), "-o", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    p = run_nel("eval", "report", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "no such output directory" in p.stderr


def test_latex_fragment_compiles(run_dir: Path, tmp_path: Path) -> None:
    tex = ok("eval", "report", str(run_dir), "-f", "latex", "--comparison",
             str(run_dir.parent / "regression.json")).stdout
    if shutil.which("pdflatex") is None:
        require_real_component("pdflatex not installed (apt-get install texlive-latex-base)")
    doc = tmp_path / "doc.tex"
    (tmp_path / "frag.tex").write_text(tex)
    doc.write_text("\\documentclass{article}\n\\begin{document}\n\\input{frag.tex}\n\\end{document}\n")
    p = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000


def test_merge_separate_shard_processes(tmp_path: Path, data_dir: Path, reference_server) -> None:
    url = reference_server()
    env = {"NEL_DATA_DIR": str(data_dir), "NEL_TOTAL_SHARDS": "3"}
    dirs = []
    for s in range(3):
        d = tmp_path / f"shard{s}"
        ok("eval", "run", "--bench", "gsm8k", "-m", "60", "--model-url", url, "--model-id", "m",
           "-o", str(d), "--no-progress", "--json", env={**env, "NEL_SHARD_IDX": str(s)})
        dirs.append(str(d))
    # two of three shard dirs: refused, with the missing shard and problem range named
    p = ok("eval", "merge", dirs[0], dirs[2], "-o", str(tmp_path / "partial"), code=1)
    assert "missing shard(s) 1 of 3" in p.stdout and "problems 20-39 have no results" in p.stdout
    assert not (tmp_path / "partial").exists() or not any((tmp_path / "partial").rglob("bundle.json"))
    p = ok("eval", "merge", dirs[0], dirs[2], "-o", str(tmp_path / "partial"), "--allow-partial", "--json")
    rep = json.loads(p.stdout)
    assert rep["bundles"][0]["n_items"] == 40 and rep["bundles"][0]["complete"] is False
    # all three: a complete merge with global metrics over 60 items
    rep = json.loads(ok("eval", "merge", *dirs, "-o", str(tmp_path / "all"), "--json").stdout)
    assert rep["complete"] and rep["shards"] == {"gsm8k/m": [0, 1, 2]}
    (b,) = rep["bundles"]
    assert b["n_items"] == 60 and b["complete"] is True
    bundle = json.loads((tmp_path / "all" / "gsm8k" / "bundle" / "model=m" / "bundle.json").read_text())
    assert bundle["shards"] == [0, 1, 2] and bundle["score"]["n_items"] == 60
    # the same shard merged twice from identical copies is fine; overlapping samples are not
    ok("eval", "merge", *dirs, dirs[0], "-o", str(tmp_path / "again"))
    bad = tmp_path / "overlap"
    shutil.copytree(dirs[1], bad)
    s1 = bad / "gsm8k" / "shard_results" / "model=m" / "shard=1"
    s0 = Path(dirs[0]) / "gsm8k" / "shard_results" / "model=m" / "shard=0"
    shutil.copy2(s0 / "part-0.parquet", s1 / "part-0.parquet")  # shard 1 now holds shard 0's samples
    p = ok("eval", "merge", dirs[0], str(bad), dirs[2], "-o", str(tmp_path / "dup"), code=2)
    assert "sample_id(s) appear more than once" in p.stderr and "0:0 (shards 0, 1)" in p.stderr


def _nel_at_a_terminal(*args: str, cwd: Path) -> tuple[int, str]:
    """`nel ARGS` with stdout and stderr on a pseudo-terminal; returns (status, what it printed)."""
    import os
    import pty
    import sys

    from tests.support.cli import nel_env
    from tests.support.realcomponents import REPO_ROOT
    from tests.support.signals import default_signals

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli.main", *args],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            cwd=cwd, env={**nel_env(), "PYTHONPATH": str(REPO_ROOT)},
                            start_new_session=True, preexec_fn=default_signals)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=300), b"".join(chunks).decode(errors="replace")


def test_html_report_at_a_terminal_goes_to_a_file(run_dir: Path, tmp_path: Path) -> None:
    """`nel report DIR` at a terminal writes report.html beside the results and says where,
    instead of printing a whole page (102 KB) to the screen; a pipe still gets the page."""
    target = run_dir / "report.html"
    target.unlink(missing_ok=True)
    status, printed = _nel_at_a_terminal("report", str(run_dir), cwd=tmp_path)
    assert status == 0, printed
    assert "<!DOCTYPE html>" not in printed and len(printed) < 500, printed[:500]
    assert f"wrote {target}" in printed and "open it in a browser" in printed
    assert target.read_text().startswith("<!DOCTYPE html>")
    target.unlink()
    # Markdown at a terminal is still printed; HTML into a pipe is still the page itself.
    status, printed = _nel_at_a_terminal("report", str(run_dir), "-f", "markdown", cwd=tmp_path)
    assert status == 0 and "| gsm8k | base |" in printed
    assert ok("report", str(run_dir)).stdout.startswith("<!DOCTYPE html>")
    assert not target.exists()
