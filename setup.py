"""Installs nel's `nemo_evaluator` import paths with the package (see pyproject.toml for the rest).

`nel_nemo_evaluator.pth` goes to site-packages beside nel: at interpreter start it appends a
finder to the END of `sys.meta_path` that answers `import nemo_evaluator` with nel's modules
(benchmarks/nemo_imports.py) only when nothing else provides it, so a script written for
NeMo Evaluator runs in nel's environment without extra lines, and a real `nemo_evaluator`
installed beside nel still wins outside nel.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "nel_nemo_evaluator.pth"


class BuildPyWithNemoPaths(build_py):
    """build_py that also puts the .pth file at the root of what is installed."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PTH
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(__file__).parent / "benchmarks" / PTH, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = dict(super().get_output_mapping())
        mapping[str(Path(self.build_lib) / PTH)] = str(Path(__file__).parent / "benchmarks" / PTH)
        return mapping


setup(cmdclass={"build_py": BuildPyWithNemoPaths})
