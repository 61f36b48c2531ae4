"""sha256 of a local weights file (or checkpoint directory), cached by (path, size, mtime)
so a multi-gigabyte file is hashed once, not on every run.

The cache is `$NEL_CACHE_DIR/weights-sha256.json` (else ~/.cache/nel): a file rewritten in
place changes its size or mtime and is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from benchmarks.datasets import nel_cache_root

_CHUNK = 1 << 20


def _cache_path() -> Path:
    return nel_cache_root() / "weights-sha256.json"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _cached(path: Path, cache: dict[str, str]) -> tuple[str, bool]:
    """(sha256 of `path`, whether it was computed now)."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if key in cache:
        return cache[key], False
    digest = _file_sha256(path)
    cache[key] = digest
    return digest, True


def weights_sha256(path: str | Path) -> str | None:
    """The sha256 of a weights file; for a directory (a Hugging Face checkpoint), the sha256
    of its files' `relative/path sha256` lines in sorted order. None when `path` is neither.
    """
    p = Path(path).expanduser()
    try:
        cache = json.loads(_cache_path().read_text(encoding="utf-8"))
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    changed = False
    try:
        if p.is_file():
            digest, changed = _cached(p, cache)
        elif p.is_dir():
            lines = []
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                d, new = _cached(f, cache)
                changed |= new
                lines.append(f"{f.relative_to(p).as_posix()} {d}\n")
            digest = hashlib.sha256("".join(lines).encode()).hexdigest()
        else:
            return None
    except OSError:
        return None
    if changed:  # best effort: a read-only cache only costs a rehash next time
        try:
            _cache_path().parent.mkdir(parents=True, exist_ok=True)
            tmp = _cache_path().with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, sort_keys=True), encoding="utf-8")
            os.replace(tmp, _cache_path())
        except OSError:
            pass
    return digest
