"""A tiny BYOB benchmark module the planning benches write next to their synthetic data: one
question per row (`q`), its answer (`a`), scored by exact numeric match."""

from __future__ import annotations


def demo_module(name: str) -> str:
    """Source of a BYOB module registering benchmark `name` over a JSONL file given as
    `params.path` (rows `{"q": ..., "a": ...}`)."""
    cls = "".join(part.title() for part in name.split("_"))
    return f'''
from pathlib import Path

from benchmarks._dataset_env import DatasetEnvironment
from benchmarks._registry import register
from benchmarks._types import SeedResult
from benchmarks.datasets import load_file


@register("{name}")
class {cls}(DatasetEnvironment):
    name = "{name}"
    version = "1"

    def __init__(self, *, path: str, protocol: str = "chat", num_fewshot: int | None = None) -> None:
        super().__init__(protocol=protocol, num_fewshot=num_fewshot)
        self.rows = load_file(Path(path))
        self._finish_init()

    def build_seed(self, row, idx):
        return SeedResult(f"Q{{idx}}: {{row['q']}}", row["a"], {{}})

    async def verify(self, response, expected, **metadata):
        from benchmarks.scoring import numeric_match

        return numeric_match(response, expected)
'''
