"""lm-eval's task index, kept on disk between processes.

Every `lm_eval.tasks.TaskManager` walks and parses lm-eval's ~16k task YAMLs (plus any
`include_path`) before it can load one task: 6-9 s of CPU here, paid again by every `nel eval
run` of an `lm-eval://` benchmark and every `nel list -s lm-eval`. The index it builds (name ->
`Entry`: kind, YAML path, the parsed config with `!function` tags unresolved, tags) depends
only on those files and on lm-eval's code, so nel keeps it under
`<NEL_CACHE_DIR or ~/.cache/nel>/lm-eval-index/`, named by a digest of lm-eval's version, the
Python version, and every file's path, size and mtime under the indexed folders. A changed,
added or removed YAML (or another lm-eval) gives another name, hence a fresh build; walking the
folders for the digest takes ~0.15 s, loading the kept index ~0.3 s.

The cache is used by swapping the `TaskIndex` that lm-eval's manager module builds with for a
subclass whose `build` goes through `cached_build`, only while nel constructs its own
TaskManager (lm-eval pinned at 0.4.13, whose manager calls `TaskIndex().build(paths)`). A cache
file that cannot be read or written is ignored: the index is built as before.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import pickle
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.datasets import nel_cache_root

_SWAP = threading.Lock()  # one swap of lm-eval's TaskIndex at a time


def cache_dir() -> Path:
    """Where the kept indexes are."""
    return nel_cache_root() / "lm-eval-index"


def index_key(paths: Iterable[Path], version: str) -> str:
    """The digest naming an index of `paths` built by lm-eval `version`."""
    h = hashlib.sha256(f"{version}|{sys.version}".encode())
    for root in paths:
        root = Path(root).resolve()
        h.update(f"\0root:{root}".encode())
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                with contextlib.suppress(OSError):  # removed meanwhile: not in the index either
                    st = os.stat(os.path.join(folder, name))
                    h.update(f"\0{os.path.relpath(os.path.join(folder, name), root)}:{st.st_size}:"
                             f"{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def cached_build(build: Callable[[list[Path]], dict[str, Any]], paths: Iterable[Path],
                 version: str) -> dict[str, Any]:
    """`build(paths)`, or the index kept from an earlier build of the same files."""
    paths = [Path(p) for p in paths]
    where = cache_dir() / f"{index_key(paths, version)}.pickle"
    try:
        data = where.read_bytes()
    except OSError:
        data = None
    if data is not None:
        collecting = gc.isenabled()
        gc.disable()  # ~16k small dicts: the collector would walk them over and over (4x slower)
        try:
            index = pickle.loads(data)
            if isinstance(index, dict):
                return index
        except Exception:  # torn or foreign: build it again (and replace it)
            pass
        finally:
            if collecting:
                gc.enable()
    index = build(paths)
    _write(where, index)
    return index


def _write(where: Path, index: dict[str, Any]) -> None:
    """Keep `index` at `where` (atomically; nothing when it cannot be written)."""
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=".index-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, where)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a read-only cache, an entry that does not pickle: the next run builds again


@contextlib.contextmanager
def index_kept_on_disk() -> Iterator[None]:
    """While inside, lm-eval TaskManagers built in this process use `cached_build`."""
    import lm_eval
    from lm_eval.tasks import manager

    original = manager.TaskIndex
    version = getattr(lm_eval, "__version__", "unknown")

    class KeptTaskIndex(original):  # type: ignore[misc,valid-type]
        """lm-eval's TaskIndex whose `build` is served from disk when the files are unchanged."""

        @staticmethod
        def build(paths: Iterable[Path], **kwargs: Any) -> dict[str, Any]:
            if kwargs:  # a call nel does not make: lm-eval's own way
                return original.build(paths, **kwargs)
            return cached_build(lambda p: original.build(p), paths, version)

    with _SWAP:
        manager.TaskIndex = KeptTaskIndex
        try:
            yield
        finally:
            manager.TaskIndex = original
