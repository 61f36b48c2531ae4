"""The real peers (NeMo Evaluator 0.3.0) installed by `make peers`: skip locally, fail in CI."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.realcomponents import REPO_ROOT, require_real_component

# `make peers` installs it here; NEL_PEER_NEMO names another `nel` executable of the peer.
DEFAULT_PEER_NEMO = REPO_ROOT / ".venv-peers" / "nemo-evaluator" / "bin" / "nel"


def peer_nemo_bin() -> Path:
    """Path of NeMo Evaluator 0.3.0's `nel` executable (skips locally, fails in CI if absent)."""
    path = Path(os.environ.get("NEL_PEER_NEMO") or DEFAULT_PEER_NEMO)
    if not path.is_file():
        require_real_component(f"NeMo Evaluator 0.3.0 is not installed at {path} (run `make peers`)")
    return path


def run_peer_nemo(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                  timeout: float = 300, unset: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """Run NeMo Evaluator's own CLI (`nel ARGS...` of the peer) and return the completed process.

    Its environment drops ours (PYTHONPATH, DAGSTER_HOME) so the peer only sees its own venv.
    """
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME", *unset)}
    full.update({"NO_COLOR": "1", "COLUMNS": "200"})
    full.update(env or {})
    return subprocess.run([str(peer_nemo_bin()), *args], capture_output=True, text=True,
                          cwd=cwd or REPO_ROOT, env=full, timeout=timeout, start_new_session=True)


# `make peers` installs NeMo Gym here; NEL_PEER_GYM names another venv that has it.
DEFAULT_PEER_GYM = REPO_ROOT / ".venv-peers" / "nemo-gym"


def peer_gym_venv() -> Path:
    """The Python 3.12 venv holding the real NeMo Gym (`ng_run`, `ng_collect_rollouts`, its
    servers); skips locally, fails in CI if absent."""
    path = Path(os.environ.get("NEL_PEER_GYM") or DEFAULT_PEER_GYM)
    if not (path / "bin" / "ng_run").is_file():
        require_real_component(f"NeMo Gym is not installed in {path} (run `make peers`)")
    return path


# `make peers` installs Inspect AI here; NEL_PEER_INSPECT names another venv that has it.
DEFAULT_PEER_INSPECT = REPO_ROOT / ".venv-peers" / "inspect-ai"


def peer_inspect_python() -> Path:
    """The Python of the Python 3.12 venv holding the real `inspect_ai` (its log reader);
    skips locally, fails in CI if absent."""
    path = Path(os.environ.get("NEL_PEER_INSPECT") or DEFAULT_PEER_INSPECT) / "bin" / "python"
    if not path.is_file() or not any((path.parent.parent / "lib").glob("python3*/site-packages/inspect_ai")):
        require_real_component(f"Inspect AI is not installed in {path.parent.parent} (run `make peers`)")
    return path


# `make peers` installs every-eval-ever here; NEL_PEER_EEE names another venv that has it.
DEFAULT_PEER_EEE = REPO_ROOT / ".venv-peers" / "every-eval-ever"


def peer_eee_python() -> Path:
    """The Python of the Python 3.12 venv holding the real `every_eval_ever` (its schema,
    pydantic models and validator); skips locally, fails in CI if absent."""
    path = Path(os.environ.get("NEL_PEER_EEE") or DEFAULT_PEER_EEE) / "bin" / "python"
    if not path.is_file() or not any((path.parent.parent / "lib").glob("python3*/site-packages/every_eval_ever")):
        require_real_component(f"every-eval-ever is not installed in {path.parent.parent} (run `make peers`)")
    return path
