"""A package's lazy public names: nothing imported until a name is used, then cached."""

from __future__ import annotations

import subprocess
import sys


def test_a_name_imports_its_submodule_on_first_use_only() -> None:
    code = ("import sys, nel_resources.proxy as p\n"
            "assert 'nel_resources.proxy.chain' not in sys.modules\n"
            "assert 'Chain' in dir(p)\n"
            "c = p.Chain\n"
            "assert 'nel_resources.proxy.chain' in sys.modules and vars(p)['Chain'] is c\n"
            "try:\n    p.nothing_here\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "module 'nel_resources.proxy' has no attribute 'nothing_here'"
