"""Test helpers shared across the suite: HTTP without proxies, reference/real servers."""

from tests.support.realcomponents import (
    in_ci,
    llama_model_path,
    require_bwrap,
    require_real_component,
    start_llama_server,
)
from tests.support.reference import (
    base_to_root,
    http_json,
    reset_server_stats,
    server_stats,
)

__all__ = [
    "base_to_root",
    "http_json",
    "in_ci",
    "llama_model_path",
    "require_bwrap",
    "require_real_component",
    "reset_server_stats",
    "server_stats",
    "start_llama_server",
]
