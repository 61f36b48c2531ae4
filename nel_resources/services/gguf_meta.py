"""Read one string from a GGUF file's metadata (the chat template a llama.cpp server applies
unless told another), without loading the tensors or a GGUF package.

GGUF v2/v3 layout: magic `GGUF`, u32 version, u64 tensor count, u64 key count, then each
key as (u64 length, bytes), a u32 value type and the value. Only the header is read.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

# GGUF value types: their fixed sizes in bytes (8 = string, 9 = array are read apart)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def _u32(f: BinaryIO) -> int:
    return int(struct.unpack("<I", f.read(4))[0])


def _u64(f: BinaryIO) -> int:
    return int(struct.unpack("<Q", f.read(8))[0])


def _string(f: BinaryIO) -> bytes:
    return f.read(_u64(f))


def _skip(f: BinaryIO, vtype: int) -> None:
    if vtype == _STRING:
        f.seek(_u64(f), 1)
    elif vtype == _ARRAY:
        etype, n = _u32(f), _u64(f)
        if etype in _SIZES:
            f.seek(_SIZES[etype] * n, 1)
        else:
            for _ in range(n):
                _skip(f, etype)
    elif vtype in _SIZES:
        f.seek(_SIZES[vtype], 1)
    else:
        raise ValueError(f"unknown GGUF value type {vtype}")


def gguf_string(path: Path, key: str) -> str | None:
    """The string value of `key` in the GGUF file's metadata; None when the file is not a
    GGUF file, has no such key, or the key is not a string."""
    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF" or _u32(f) < 2:
                return None
            _u64(f)  # tensor count
            for _ in range(_u64(f)):
                name, vtype = _string(f), _u32(f)
                if name.decode("utf-8", "replace") == key:
                    return _string(f).decode("utf-8", "replace") if vtype == _STRING else None
                _skip(f, vtype)
    except (OSError, ValueError, struct.error):
        return None
    return None
