"""Read a W&B offline run back from its `run-<id>.wandb` file, as `wandb sync` would.

wandb 0.31 dropped its Python reader of these files (`wandb.sdk.internal.datastore`); the
file is wandb's LevelDB-log framing (a `:W&B` header, 32 KiB blocks of CRC-checked chunks)
around wandb's own protobuf `Record`s, parsed here with `wandb.proto.wandb_internal_pb2`.
Every chunk's checksum is checked, so a torn or foreign file fails instead of reading short.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

_BLOCK = 32768
_HEADER = struct.Struct("<IHB")  # crc32, length, chunk type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """What an offline run file holds."""

    run_id: str = ""
    project: str = ""
    entity: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged row
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    exit_code: int | None = None


def records(path: Path) -> list[pb.Record]:
    """Every record of a `.wandb` file, in order."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    pos, parts, out = 7, b"", []
    while pos + _HEADER.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER.size:  # a block's tail too short for a header is padding
            pos += left
            continue
        crc, length, kind = _HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + _HEADER.size:pos + _HEADER.size + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc, f"bad checksum at {pos}"
        pos += _HEADER.size + length
        if kind in (_FULL, _FIRST):
            parts = chunk
        else:
            parts += chunk
        if kind in (_FULL, _LAST):
            rec = pb.Record()
            rec.ParseFromString(parts)
            out.append(rec)
    return out


def _items(items: Any) -> dict[str, Any]:
    return {"/".join(i.nested_key) if i.nested_key else i.key: json.loads(i.value_json) for i in items}


def read_run(path: Path) -> OfflineRun:
    """The run in the `.wandb` file `path`: config, history rows, final summary, files."""
    run = OfflineRun()
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.run_id, run.project, run.entity, run.name = r.run_id, r.project, r.entity, r.display_name
            run.tags = list(r.tags)
            run.config.update(_items(r.config.update))
        elif kind == "config":
            run.config.update(_items(rec.config.update))
        elif kind == "history":
            run.history.append(_items(rec.history.item))
        elif kind == "summary":
            run.summary.update(_items(rec.summary.update))
        elif kind == "files":
            run.files += [f.path for f in rec.files.files]
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run
