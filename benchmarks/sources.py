"""Where every built-in benchmark's data comes from, and where it lives locally.

One `Source` per benchmark: the canonical upstream (a Hugging Face dataset id at a pinned
revision, or a URL), the original files in the layout nel reads under `NEL_DATA_DIR` (or
the cache, `benchmarks.datasets.cache_root()`), a sha256 where the upstream file is fixed,
and the expected item count. `nel data list|pull|import` are driven by this table; the
loaders themselves only need `relpath`.

Pure Python, no network at import time: downloads happen only in `pull_file`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.datasets import cache_root, data_root, sha256_file
from benchmarks.errors import DataMissingError, NelError

__all__ = [
    "SOURCES",
    "FileStatus",
    "Source",
    "SourceFile",
    "file_status",
    "get_source",
    "import_path",
    "pull",
]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One original file (or folder) of a benchmark.

    Attributes:
        relpath: Path under `<root>/<benchmark>/` (a trailing `/` marks a folder).
        sha256: Hex digest of the upstream bytes, when the upstream file is fixed.
        url: Direct download URL of this exact file, when there is one.
        required: False for optional files (few-shot splits, alternative layouts).
    """

    relpath: str
    sha256: str | None = None
    url: str | None = None
    required: bool = True

    @property
    def is_dir(self) -> bool:
        return self.relpath.endswith("/")


@dataclass(frozen=True, slots=True)
class Source:
    """The canonical source of one benchmark."""

    name: str
    files: tuple[SourceFile, ...]
    n_items: int
    origin: str
    hf_id: str | None = None
    hf_revision: str | None = None
    license: str = ""
    notes: str = ""
    judge: bool = False
    extra: dict[str, str] = field(default_factory=dict)


GH_RAW = "https://raw.githubusercontent.com"
OPENAI_BLOB = "https://openaipublic.blob.core.windows.net/simple-evals"


class _Sources(Mapping[str, Source]):
    """Benchmark name -> its `Source`, read from the registered benchmarks' `source`
    attribute (the one place a benchmark's data source is written). Built on first use:
    it imports every benchmark module, which only `nel data` and `nel list` need."""

    def __init__(self) -> None:
        self._table: dict[str, Source] | None = None

    def _load(self) -> dict[str, Source]:
        if self._table is None:
            from benchmarks._registry import BENCHMARKS, is_builtin

            table: dict[str, Source] = {}
            for name in BENCHMARKS.names():
                src = getattr(BENCHMARKS.load(name), "source", None) if is_builtin(name) else None
                if isinstance(src, Source):
                    table[name] = src
            self._table = table
        return self._table

    def __getitem__(self, name: str) -> Source:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


SOURCES: Mapping[str, Source] = _Sources()


def get_source(name: str) -> Source:
    """The source of built-in benchmark `name` (NelError naming the known ones otherwise)."""
    try:
        return SOURCES[name]
    except KeyError:
        raise NelError(
            f"no data source for {name!r}; known: {', '.join(sorted(SOURCES))}"
        ) from None


@dataclass(frozen=True, slots=True)
class FileStatus:
    """Where one source file was found and whether its bytes are the expected ones."""

    file: SourceFile
    path: Path | None
    check: str  # ok | mismatch | unknown | missing

    @property
    def present(self) -> bool:
        return self.path is not None


def _locate(bench: str, f: SourceFile) -> Path | None:
    for root in (data_root(), cache_root()):
        if root is None:
            continue
        p = root / bench / f.relpath.rstrip("/")
        if (p.is_dir() and any(p.iterdir())) if f.is_dir else p.is_file():
            return p
    return None


def file_status(bench: str, f: SourceFile, *, verify: bool = True) -> FileStatus:
    """Locate `f` under the data root or the cache and check its sha256 when known."""
    path = _locate(bench, f)
    if path is None:
        return FileStatus(f, None, "missing")
    if not verify or f.sha256 is None or f.is_dir:
        return FileStatus(f, path, "unknown")
    return FileStatus(f, path, "ok" if sha256_file(path) == f.sha256 else "mismatch")


def _offline() -> bool:
    return any(os.environ.get(v, "") in ("1", "true", "True", "yes")
               for v in ("HF_HUB_OFFLINE", "NEL_OFFLINE"))


def _download(url: str, dest: Path, timeout: float) -> None:
    import urllib.request  # only a download needs it (`nel list` reads SOURCES)

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def pull(name: str, *, timeout: float = 30.0) -> list[Path]:
    """Download a benchmark's original files into the cache (`nel data pull`).

    Files with a direct URL are fetched as they are and checked against their sha256.
    Offline (`HF_HUB_OFFLINE=1` or `NEL_OFFLINE=1`) this fails at once.

    Raises:
        DataMissingError: one line naming the file, its URL and `nel data import`.
    """
    src = get_source(name)
    dest_root = cache_root() / name
    todo = [f for f in src.files if f.required or f.url]
    done: list[Path] = []
    for f in todo:
        url = f.url or src.extra.get("url")
        how = f"download {url} and run `nel data import {name} PATH`" if url else (
            f"get it from the Hugging Face dataset {src.hf_id} and run "
            f"`nel data import {name} PATH`")
        if f.url is None:
            raise DataMissingError(
                f"{name}: {f.relpath} has no direct download (it is packed upstream); {how}")
        if _offline():
            raise DataMissingError(
                f"{name}: offline (HF_HUB_OFFLINE/NEL_OFFLINE is set), cannot pull {f.relpath}; {how}")
        dest = dest_root / f.relpath
        try:
            _download(f.url, dest, timeout)
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise DataMissingError(
                f"{name}: download of {f.url} failed ({type(exc).__name__}: "
                f"{str(reason).splitlines()[0][:120]}); {how}") from None
        if f.sha256 and sha256_file(dest) != f.sha256:
            dest.unlink()
            raise DataMissingError(f"{name}: {f.url} does not have the expected sha256 {f.sha256}")
        done.append(dest)
    return done


def import_path(name: str, path: str | os.PathLike[str]) -> list[Path]:
    """Copy a local original file or folder into the cache layout (`nel data import`).

    A file is matched to the source file of the same name; a folder is searched for every
    source file by relative path or name. Known sha256 digests are verified before copying.

    Raises:
        NelError: the path does not hold any of the benchmark's files, or a digest differs.
    """
    src = get_source(name)
    p = Path(path).expanduser()
    if not p.exists():
        raise NelError(f"{name}: {p} does not exist")
    pairs: list[tuple[SourceFile, Path]] = []
    for f in src.files:
        rel = f.relpath.rstrip("/")
        if p.is_file():
            if p.name == Path(rel).name:
                pairs.append((f, p))
            continue
        for cand in (p / rel, p / name / rel, p / Path(rel).name):
            if (cand.is_dir() and f.is_dir) or (cand.is_file() and not f.is_dir):
                pairs.append((f, cand))
                break
    if not pairs:
        wanted = ", ".join(f.relpath for f in src.files)
        raise NelError(f"{name}: {p} is not one of the expected files ({wanted})")
    out: list[Path] = []
    for f, found in pairs:
        if f.sha256 and not f.is_dir:
            got = sha256_file(found)
            if got != f.sha256:
                raise NelError(
                    f"{name}: {found} has sha256 {got[:16]}…, expected {f.sha256[:16]}… "
                    "(not the original file)")
        dest = cache_root() / name / f.relpath.rstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.is_dir:
            shutil.copytree(found, dest, dirs_exist_ok=True)
        else:
            tmp = dest.with_name(f".part-{dest.name}")
            shutil.copyfile(found, tmp)
            os.replace(tmp, dest)
        out.append(dest)
    return out
