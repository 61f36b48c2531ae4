"""The documentation site builds in strict mode, and a broken internal link fails the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs.doc_examples import REPO_ROOT


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"})


def test_site_builds_strict(tmp_path: Path) -> None:
    p = _build(REPO_ROOT, tmp_path / "site")
    assert p.returncode == 0, p.stdout + p.stderr
    for page in ("index.html", "how-to/slurm/index.html", "reference/config/index.html",
                 "reference/cli/index.html", "explanation/statistics/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_broken_internal_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
    shutil.copy(REPO_ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "how-to" / "sql.md"
    page.write_text(page.read_text() + "\nSee [the gone page](gone.md).\n")
    p = _build(tmp_path, tmp_path / "site")
    assert p.returncode != 0 and "gone.md" in p.stdout + p.stderr, p.stdout + p.stderr
