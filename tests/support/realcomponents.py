"""Real components (llama.cpp server, datasets): skip locally when absent, fail in CI."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from nel_resources.runtime.processes import ManagedProcess, start_on_free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def in_ci() -> bool:
    """True when the ``CI`` environment variable says so (``true``/``1``/``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_real_component(reason: str) -> NoReturn:
    """Skip the test locally, but fail it in CI: real components must run there."""
    if in_ci():
        pytest.fail(f"required real component unavailable in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require_bwrap() -> None:
    """Bubblewrap, for the `local` sandbox: skip locally / fail in CI when it is missing."""
    import shutil

    if shutil.which("bwrap") is None:
        require_real_component("bubblewrap (bwrap) is not installed: run `make system-deps`")


def llama_model_path() -> Path:
    """The tiny GGUF model: ``NEL_TEST_MODEL`` or ``<repo>/../shared/models/stories260K.gguf``."""
    default = REPO_ROOT.parent / "shared" / "models" / "stories260K.gguf"
    return Path(os.environ.get("NEL_TEST_MODEL") or default)


def start_llama_server(
    model: Path, *, alias: str = "stories260K", timeout: float = 600.0, attempts: int = 3,
    n_ctx: int = 512,
) -> tuple[ManagedProcess, str]:
    """Start ``llama_cpp.server`` on a free port with one thread; wait for /v1/models.

    `n_ctx`: the context window (stories260K was trained on 512 tokens; an agent's long
    prompt needs more, and the server allows it).

    llama_cpp.server cannot bind port 0 and report it, so a port is picked first; if another
    process grabs it in between the server exits at once and we retry on a fresh port.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        require_real_component("llama_cpp is not installed (pip install 'nel[llama]')")
    if not model.is_file():
        require_real_component(f"model file {model} is missing (set NEL_TEST_MODEL)")
    def make(port: int) -> ManagedProcess:
        return ManagedProcess(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias,
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
             "--n_threads", "1", "--n_threads_batch", "1"],
            name="llama-server",
            # One thread as asked, and keep BLAS/OpenMP from spreading over the shared cores.
            env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
        )

    proc, port = start_on_free_port(make, lambda p: f"http://127.0.0.1:{p}/v1/models",
                                    timeout=timeout, attempts=attempts, stall=60.0)
    return proc, f"http://127.0.0.1:{port}/v1"
