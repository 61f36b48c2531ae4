"""Where Harbor runs: its CLI's venv (Harbor needs Python >= 3.12; nel runs on 3.11).

`make peers` installs `harbor==0.24.0` in a Python 3.12 venv (deploy/peers/install_peer.sh)
linked at `.venv-peers/harbor`; the `harbor` solver runs its agents with that venv's Python.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

__all__ = ["CHECKOUT_HARBOR", "harbor_python"]


#: Where `make peers` links Harbor's venv in this checkout.
CHECKOUT_HARBOR = Path(__file__).resolve().parents[2] / ".venv-peers" / "harbor" / "bin" / "harbor"


def harbor_python(harbor_bin: str) -> Path | None:
    """The Python of the venv `harbor_bin` (a name on PATH or a path) belongs to, or None
    when there is no such CLI. The default name, `harbor`, not on PATH is looked for where
    `make peers` puts it in this checkout."""
    found = shutil.which(harbor_bin)
    if found is None and harbor_bin == "harbor" and CHECKOUT_HARBOR.exists():
        found = str(CHECKOUT_HARBOR)
    if found is None:
        return None
    for name in ("python", "python3"):
        beside = Path(found).parent / name
        if beside.exists():
            return beside
    with contextlib.suppress(OSError, UnicodeDecodeError, IndexError):
        first = Path(found).read_text().splitlines()[0]  # a console script's shebang
        if first.startswith("#!") and Path(first[2:].strip()).exists():
            return Path(first[2:].strip())
    return None
