"""Import benchmark modules (BYOB files or packages) so their benchmarks register."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from benchmarks.errors import NelError

# benchmark name -> the file or module that registered it (shown by `nel list`)
_ORIGINS: dict[str, str] = {}


def benchmark_origin(name: str) -> str | None:
    """The file (or module) whose import registered `name`, if `load_module` loaded it."""
    return _ORIGINS.get(name)


def load_module(ref: str) -> None:
    """Import a dotted module name or a `.py` file once per process.

    A file is registered under a name derived from its absolute path, so `nel serve
    --import x.py` and a config's `module: x.py` in one process load it only once.

    Raises:
        NelError: when the file or module cannot be found or loaded.
    """
    from benchmarks._registry import list_benchmarks

    ref = ref.strip()
    before = set(list_benchmarks())
    try:
        _load(ref)
    finally:
        origin = str(Path(ref).expanduser().resolve()) if ref.endswith(".py") or "/" in ref else ref
        for name in set(list_benchmarks()) - before:
            _ORIGINS[name] = origin


def _load(ref: str) -> None:
    if ref.endswith(".py") or "/" in ref:
        path = Path(ref).expanduser().resolve()
        if not path.is_file():
            raise NelError(f"benchmark module not found: {path}")
        name = f"nel_plugin_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        if name in sys.modules:
            return
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise NelError(f"cannot load benchmark module {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
        return
    try:
        importlib.import_module(ref)
    except ModuleNotFoundError as exc:
        raise NelError(f"cannot import benchmark module {ref!r} ({exc})") from None


def resolve_benchmark_ref(ref: str) -> str:
    """The registered name a benchmark reference means, importing its file first if it is one.

    As NeMo Evaluator 0.3.0: ``path/to/file.py`` is the one benchmark that file registers
    (or the one named after the file's stem when it was registered already),
    ``path/to/file.py:name`` picks one of several. Anything else is returned unchanged
    (a registered name, ``gym://...``).

    Raises:
        NelError: the file is missing, registers none or several without ``:name``, or
            ``name`` is not among the registered benchmarks.
    """
    from benchmarks._registry import list_benchmarks

    path, sep, explicit = ref.rpartition(":")
    if not (sep and path.endswith(".py")):
        path, explicit = ref, ""
    if not path.endswith(".py"):
        return ref
    before = set(list_benchmarks())
    load_module(path)
    known = list_benchmarks()
    new = sorted(set(known) - before)
    if explicit:
        if explicit not in known:
            raise NelError(f"{path}: no benchmark {explicit!r} (it registers: {', '.join(new) or 'none'})")
        return explicit
    if len(new) == 1:
        return new[0]
    if len(new) > 1:
        raise NelError(f"{path} registers {len(new)} benchmarks ({', '.join(new)}); "
                       f"pick one with {path}:NAME")
    stem = Path(path).stem.lower().replace("-", "_")
    if stem in known:  # loaded earlier in this process: the file's own name
        return stem
    raise NelError(f"{path} registers no benchmark (decorate it with @benchmark and @scorer)")
