"""`cluster.type: local` (the default): the runner evaluates every stale partition in this
process; `cluster.shards` splits a benchmark, and one `nel eval run` per shard may run it
elsewhere by hand (NEL_SHARD_IDX / NEL_TOTAL_SHARDS)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from nel_resources.launchers.base import COMMON_KEYS, Launcher, Refusal

if TYPE_CHECKING:
    from nel_resources.config import NelConfig

# NeMo Evaluator's local-cluster keys nel does not honour yet.
_UNBUILT = {"gpus": "GPU selection", "max_memory": "memory limits",
            "container_env": "container environment variables"}


class LocalCluster(Launcher):
    """Runs here; refuses the NeMo Evaluator local keys nel has no use for yet."""

    kind = "local"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | set(_UNBUILT)
    runs = "here"

    def refusal(self, cfg: NelConfig) -> Refusal | None:
        """Another type's block, or `gpus` / `max_memory` / `container_env`."""
        if (bad := super().refusal(cfg)) is not None:
            return bad
        c = cfg.cluster
        for name, what in _UNBUILT.items():
            if getattr(c, name) not in (None, [], {}):
                return Refusal.unbuilt(("cluster", name), f"cluster.{name} ({what})", f"remove `{name}`")
        return None
