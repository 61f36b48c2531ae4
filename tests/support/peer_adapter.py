"""NeMo Evaluator 0.3.0's own adapter proxy (`nemo_evaluator.adapters.proxy`), run in the
peer's Python 3.12 in front of an upstream, with the interceptors a test names: what its
interceptors send and answer is compared with nel's on the wire."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.peers import peer_nemo_bin
from tests.support.signals import default_signals

# Starts the peer's proxy on a free port, prints its URL, and serves until stdin closes.
_SCRIPT = """
import json, sys, logging
logging.basicConfig(level=logging.WARNING)
import nemo_evaluator.adapters.proxy as proxy
from nemo_evaluator.adapters.proxy import start_adapter_proxy
# Its own wait for /health gives up after 10 s, too soon on a loaded 2-core machine: the
# same wait, a longer ceiling (the interceptors themselves are untouched).
_wait = proxy._wait_for_health
proxy._wait_for_health = lambda url, timeout=10: _wait(url, timeout=180)
h = start_adapter_proxy(upstream_url=sys.argv[1], model_id=sys.argv[2], port=0,
                        api_key=sys.argv[4] or None, interceptor_specs=json.loads(sys.argv[3]))
print(h.url, flush=True)
sys.stdin.read()
h.stop()
"""


@contextmanager
def peer_adapter_proxy(upstream: str, specs: list[dict[str, Any]], *, model: str = "tiny",
                       api_key: str = "", cwd: Path | None = None) -> Iterator[str]:
    """The URL of NeMo Evaluator 0.3.0's proxy (no `/v1`: paths go as sent, below the
    upstream's `.../v1`) running `specs` (`[{"name": ..., "config": {...}}]`)."""
    python = peer_nemo_bin().parent / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")}
    log = tempfile.TemporaryFile("w+")  # its log, read only if it fails to start
    proc = subprocess.Popen([str(python), "-c", _SCRIPT, upstream, model, json.dumps(specs), api_key],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            text=True, env=env, cwd=cwd, start_new_session=True,
                            preexec_fn=default_signals)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # blocks until it is healthy, or it exited
        if not url.startswith("http://127.0.0.1:"):
            proc.wait(timeout=60)
            log.seek(0)
            raise AssertionError(f"the peer's proxy did not start: {log.read()[-2000:]}")
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        log.close()
