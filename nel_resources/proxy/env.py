"""What a chain's interceptors get from the run that builds them."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nel_resources.wire.redact import Redactor

LOG = logging.getLogger("nel.proxy")


def default_cache_dir() -> Path:
    """`$NEL_CACHE_DIR/responses`, else `~/.cache/nel/responses`: shared across runs."""
    from benchmarks.datasets import nel_cache_root

    return nel_cache_root() / "responses"


def proxy_logger() -> logging.Logger:
    """The `nel.proxy` logger, writing INFO lines to stderr unless the app set logging up.

    `nel eval run` configures no logging by default, and an interceptor the user asked for
    (`logging`, `log_tokens`, `response_stats`) must show its lines.
    """
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s nel.proxy %(message)s"))
        LOG.addHandler(handler)
        LOG.propagate = False
    if LOG.level == logging.NOTSET:  # a level the app set (a benchmark quietening it) stays
        LOG.setLevel(logging.INFO)
    return LOG


@dataclass
class ChainEnv:
    """Run-wide inputs of the interceptors.

    Attributes:
        service: the service name (in log lines and webhook posts).
        redactor: masks the run's secrets in everything an interceptor writes.
        cache_dir: where `caching` keeps its store when its config names none.
    """

    service: str = "model"
    redactor: Redactor = field(default_factory=lambda: Redactor(()))
    cache_dir: Path = field(default_factory=default_cache_dir)
