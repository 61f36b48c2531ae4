"""`import nemo_evaluator` in nel's environment with no extra lines, and names read safely.

benchmarks/nel_nemo_evaluator.pth (installed into site-packages by a wheel of nel, and by
`make setup` for the editable install) puts a finder LAST in `sys.meta_path`: nel's modules
answer `nemo_evaluator` only when nothing else does, so a real NeMo Evaluator beside nel
still wins outside nel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.realcomponents import REPO_ROOT, require_real_component

PTH = REPO_ROOT / "benchmarks" / "nel_nemo_evaluator.pth"
SCRIPT = """
import nemo_evaluator
from nemo_evaluator import ScorerInput, benchmark, exact_match, scorer
from nemo_evaluator.engine import compare_runs
print(nemo_evaluator.__version__, benchmark.__module__, compare_runs.__module__)
"""


def _python(code: str, *, site_dir: Path | None, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    prefix = f"import site; site.addsitedir({str(site_dir)!r})\n" if site_dir else ""
    path = os.pathsep.join(str(p) for p in (extra_path, REPO_ROOT) if p)
    return subprocess.run([sys.executable, "-c", prefix + code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path}, timeout=120)


def test_the_pth_serves_nemo_evaluator_to_a_plain_script(tmp_path: Path) -> None:
    (tmp_path / PTH.name).write_text(PTH.read_text())
    proc = _python(SCRIPT, site_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0.3.0", "benchmarks.byob", "nel_assets.engine.results.runs"]
    # without the .pth the same script fails: the finder is what makes it work
    bare = _python(SCRIPT, site_dir=None)
    if not (Path(sysconfig.get_paths()["purelib"]) / PTH.name).is_file():
        assert bare.returncode != 0 and "No module named 'nemo_evaluator'" in bare.stderr


def test_a_real_nemo_evaluator_beside_nel_still_wins(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / PTH.name).write_text(PTH.read_text())
    real = tmp_path / "real" / "nemo_evaluator"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("__version__ = 'the real one'\n")
    proc = _python("import nemo_evaluator; print(nemo_evaluator.__version__)",
                   site_dir=tmp_path / "site", extra_path=tmp_path / "real")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "the real one"


def test_the_environment_has_it_installed() -> None:
    installed = Path(sysconfig.get_paths()["purelib"]) / PTH.name
    if not installed.is_file():
        require_real_component(f"{installed} is missing (`make setup` installs it)")
    assert installed.read_text() == PTH.read_text()
    proc = _python(SCRIPT, site_dir=None)
    assert proc.returncode == 0, proc.stderr


def test_refused_names_behave_with_getattr_and_still_say_why_on_import() -> None:
    code = """
from benchmarks.nemo_imports import install_nemo_imports
install_nemo_imports()
import nemo_evaluator as ne
print(getattr(ne, "NatSolver", "default"), hasattr(ne, "OracleSolver"), getattr(ne, "nope", 7))
try:
    from nemo_evaluator import NatSolver
except ImportError as exc:
    print("ImportError:", exc)
"""
    proc = _python(code, site_dir=None)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first == "default False 7"
    assert second == ("ImportError: nemo_evaluator.NatSolver: solvers other than `simple` "
                      "(chat/completion) are not supported yet in nel")
