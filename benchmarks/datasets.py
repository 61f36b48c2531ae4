"""Dataset loading: local files, the local data root, and the Hugging Face hub.

Sources:
- a local path to JSONL (optionally .gz), JSON, CSV/TSV or Parquet;
- `hf://org/name?split=test&config=main` (downloaded once into the hub cache; honours
  `HF_HUB_OFFLINE`);
- built-in benchmarks look under the data root (`NEL_DATA_DIR`, or the `data_dir` config
  key) in the layout of the original files, then in nel's cache, then on the hub, but
  only when downloads are allowed (`NEL_ALLOW_DOWNLOADS=1` / `allow_downloads: true`).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from benchmarks.errors import DataMissingError, NelError

_DATA_DIR_OVERRIDE: str | None = None
# Set while the Dagster definitions load: hub files then come from the local cache only.
_HUB_LOCAL_ONLY: ContextVar[bool] = ContextVar("nel_hub_local_only", default=False)


@contextmanager
def hub_local_only() -> Iterator[None]:
    """Within the block, hub files come from the local hub cache only, never the network.

    Loading the Dagster definitions builds each benchmark to fingerprint it; that must be
    quick and offline (a webserver or daemon reloads it often), so a file that is not on
    this machine fails at once instead of retrying the hub for half a minute.
    """
    token = _HUB_LOCAL_ONLY.set(True)
    try:
        yield
    finally:
        _HUB_LOCAL_ONLY.reset(token)


def _hub_offline() -> bool:
    return _HUB_LOCAL_ONLY.get() or os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True")


def set_data_dir(path: str | os.PathLike[str] | None) -> None:
    """Set the local data root for this process (the config's `data_dir` key)."""
    global _DATA_DIR_OVERRIDE
    _DATA_DIR_OVERRIDE = str(path) if path else None


def data_root() -> Path | None:
    """The local data root (`NEL_DATA_DIR` / config `data_dir`), if any."""
    root = _DATA_DIR_OVERRIDE or os.environ.get("NEL_DATA_DIR")
    return Path(root).expanduser() if root else None


def nel_cache_root() -> Path:
    """The root of nel's own caches (`NEL_CACHE_DIR`, else ~/.cache/nel): the proxy's response
    cache, the Dagster instance template."""
    return Path(os.environ.get("NEL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "nel"))


def cache_root() -> Path:
    """Where `nel data pull/import` keep benchmark files (`NEL_CACHE_DIR`)."""
    base = os.environ.get("NEL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "nel", "data"
    )
    return Path(base)


@dataclass(frozen=True, slots=True)
class HubFile:
    """A file in a Hugging Face dataset repo that stands in for a local original."""

    repo_id: str
    filename: str
    revision: str = "main"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_ALLOW_DOWNLOADS: bool | None = None


def set_allow_downloads(allowed: bool | None) -> None:
    """Set the config's `allow_downloads` for this process (None: `NEL_ALLOW_DOWNLOADS`)."""
    global _ALLOW_DOWNLOADS
    _ALLOW_DOWNLOADS = allowed


def downloads_allowed() -> bool:
    """Whether a missing benchmark file may be fetched from the Hugging Face hub.

    Off unless asked for (`NEL_ALLOW_DOWNLOADS=1` or `allow_downloads: true`): a run on a
    machine without network must fail at once saying where the file goes, not retry DNS.
    """
    if _ALLOW_DOWNLOADS is not None:
        return _ALLOW_DOWNLOADS
    return os.environ.get("NEL_ALLOW_DOWNLOADS", "").strip().lower() in ("1", "true", "yes")


def _check_data_root(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise DataMissingError(f"the data directory {root} (NEL_DATA_DIR / data_dir) is a file, "
                               "not a directory; point it at the folder holding <benchmark>/<file>")


def find_local(bench: str, relpath: str) -> Path | None:
    """The benchmark file under the data root or the cache, if present."""
    for root in (data_root(), cache_root()):
        if root is not None:
            p = root / bench / relpath
            if p.exists():
                return p
    return None


def resolve_file(bench: str, relpath: str, hub: HubFile | None = None) -> Path:
    """Find a built-in benchmark's original file, downloading from the hub if allowed.

    Raises:
        DataMissingError: one line saying exactly which file to provide and where.
    """
    root = data_root()
    if root is not None:
        _check_data_root(root)
    local = find_local(bench, relpath)
    if local is not None:
        return local
    where = root or cache_root()
    hint = (
        f"{bench}: data file {relpath!r} not found; put the original file at "
        f"{where / bench / relpath} (NEL_DATA_DIR or the config's data_dir names the folder "
        f"holding {bench}/{relpath}), or run `nel data import {bench} PATH`"
    )
    if hub is None:
        raise DataMissingError(hint)
    if not downloads_allowed():
        raise DataMissingError(f"{hint}; or allow a download from the Hugging Face hub "
                               f"({hub.repo_id}) with NEL_ALLOW_DOWNLOADS=1")
    try:
        return _hub_download(hub)
    except DataMissingError as exc:
        raise DataMissingError(f"{hint}; hub download of {hub.repo_id} failed: {exc}") from None


def _hub_download(hub: HubFile) -> Path:
    if _hub_offline():
        # The hub library would raise a long traceback-y error; say it plainly instead.
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(hub.repo_id, hub.filename, repo_type="dataset")
        except Exception:  # pragma: no cover - hub library quirks
            cached = None
        if isinstance(cached, str):
            return Path(cached)
        raise DataMissingError("offline (HF_HUB_OFFLINE, or loading definitions) and the file is not "
                               "in the hub cache")
    try:
        from huggingface_hub import hf_hub_download

        return Path(
            hf_hub_download(
                hub.repo_id, hub.filename, repo_type="dataset", revision=hub.revision
            )
        )
    except Exception as exc:
        raise DataMissingError(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None


def parse_hf_uri(uri: str) -> tuple[str, dict[str, str]]:
    """Split `hf://org/name?split=test&config=main` into (repo_id, params)."""
    u = urlparse(uri)
    repo = (u.netloc + u.path).strip("/")
    if repo.count("/") != 1:
        raise NelError(f"bad hf:// dataset {uri!r}: expected hf://ORG/NAME?split=...&config=...")
    params = {k: v[-1] for k, v in parse_qs(u.query).items()}
    return repo, params


def load_hf(uri: str) -> list[dict[str, Any]]:
    """Load a dataset split from the Hugging Face hub (Parquet files of the repo)."""
    repo, params = parse_hf_uri(uri)
    split = params.get("split", "test")
    config = params.get("config")
    revision = params.get("revision", "main")
    try:
        from huggingface_hub import snapshot_download

        allow = [f"{config}/{split}-*", f"{config}/{split}/*"] if config else [
            f"*{split}-*", f"*/{split}-*", f"*/{split}/*", f"{split}/*"
        ]
        local = snapshot_download(
            repo, repo_type="dataset", revision=revision, allow_patterns=allow,
            local_files_only=_hub_offline(),
        )
    except Exception as exc:
        raise DataMissingError(
            f"cannot load {uri}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]} "
            "(set HF_HUB_OFFLINE=0 on a connected machine, or use a local file path)"
        ) from None
    files = sorted(Path(local).rglob("*.parquet")) + sorted(Path(local).rglob("*.jsonl"))
    if not files:
        raise DataMissingError(f"{uri}: no Parquet/JSONL files for split {split!r}")
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(load_file(f))
    return rows


def load_records(source: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Load rows from a local file or an `hf://` URI."""
    s = str(source)
    if s.startswith("hf://"):
        return load_hf(s)
    p = Path(s).expanduser()
    if not p.exists():
        raise DataMissingError(f"dataset file not found: {p}")
    return load_file(p)


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def load_file(path: Path, *, fieldnames: list[str] | None = None) -> list[dict[str, Any]]:
    """Read JSONL/JSON/CSV/TSV/Parquet (by suffix; `.gz` allowed for text formats)."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with _open_text(path) as f:
        if name.endswith(".jsonl"):
            return [_json_line(path, i, line) for i, line in enumerate(f, 1) if line.strip()]
        if name.endswith(".json"):
            data = json.load(f)
            if isinstance(data, dict):
                data = data.get("data") or data.get("rows") or list(data.values())
            return list(data)
        if name.endswith((".csv", ".tsv")):
            delim = "\t" if name.endswith(".tsv") else ","
            reader: Iterable[Any]
            if fieldnames is not None:
                reader = csv.DictReader(f, fieldnames=fieldnames, delimiter=delim)
            else:
                reader = csv.DictReader(f, delimiter=delim)
            return [dict(r) for r in reader]
    raise NelError(f"unsupported dataset format: {path} (use .jsonl, .json, .csv, .tsv, .parquet)")


def _json_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise NelError(f"{path}:{lineno}: invalid JSON line ({exc.msg})") from None


def content_hash(rows: list[dict[str, Any]]) -> str:
    """Stable hash of loaded rows (the dataset asset's data version)."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps(r, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]
