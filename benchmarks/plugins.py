"""Import benchmark modules (BYOB files or packages) so their benchmarks register.

Every load first installs the `nemo_evaluator` import paths (`benchmarks/nemo_imports.py`),
so a file written for NeMo Evaluator 0.3.0 loads unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from benchmarks import _registry
from benchmarks.errors import NelError
from benchmarks.nemo_imports import install_nemo_imports

# Benchmarks each file registered, by resolved path: a second load of the same file (a
# config's `module:` and `--bench` naming one file) answers from here.
_FILE_BENCHMARKS: dict[Path, list[str]] = {}

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
    install_nemo_imports()
    ref = ref.strip()
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
        before = _registry.registered_at_run_time()
        try:
            spec.loader.exec_module(mod)
        except (NelError, ImportError) as exc:
            # A missing import or a refused name is a setup problem, not a bug in the file:
            # one line naming the file's line.
            del sys.modules[name]
            raise NelError(f"{path}:{_line_in(exc, path)}: {exc}") from None
        except BaseException:
            del sys.modules[name]
            raise
        _FILE_BENCHMARKS[path] = sorted(
            k for k, f in _registry.registered_at_run_time().items() if before.get(k) is not f)
        _ORIGINS.update(dict.fromkeys(_FILE_BENCHMARKS[path], str(path)))
        _say_replaced_builtins(_FILE_BENCHMARKS[path], str(path))
        return
    before = _registry.registered_at_run_time()
    try:
        importlib.import_module(ref)
    except ModuleNotFoundError as exc:
        raise NelError(f"cannot import benchmark module {ref!r} ({exc})") from None
    _ORIGINS.update(dict.fromkeys(
        (k for k, f in _registry.registered_at_run_time().items() if before.get(k) is not f), ref))


def _say_replaced_builtins(names: list[str], origin: str) -> None:
    """One line per process for a file whose benchmark takes a built-in's name: the file's
    own benchmark runs (as in NeMo Evaluator, whose built-ins are such files), and the user
    learns that the name no longer means nel's built-in."""
    for name in names:
        if name in _registry.BUILTINS and name not in _SAID_REPLACED:
            _SAID_REPLACED.add(name)
            print(f"note: {origin} registers {name!r}, which replaces nel's built-in {name!r} "
                  "in this run", file=sys.stderr)


_SAID_REPLACED: set[str] = set()


def _line_in(exc: BaseException, path: Path) -> int | str:
    """The line of `path` the exception passed through last ('?' if none)."""
    line: int | str = "?"
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_benchmark_file(path: str | Path, name: str | None = None) -> list[str]:
    """Load a benchmark file (NeMo Evaluator's `--bench ./file.py[:name]`); its benchmark names.

    Args:
        path: The `.py` file.
        name: The benchmark wanted, when the file registers several.

    Returns:
        `[name]` when `name` is given, else every benchmark the file registered (at least one).

    Raises:
        NelError: the file is missing, registers nothing, or does not register `name`.
    """
    resolved = Path(path).expanduser().resolve()
    if resolved.suffix != ".py":
        raise NelError(f"{path}: a benchmark file must be a .py file")
    load_module(str(resolved))
    names = _FILE_BENCHMARKS.get(resolved, [])
    if name is not None:
        if name not in names and name not in _registry.BENCHMARKS:
            raise NelError(f"{path} does not register a benchmark {name!r} "
                           f"(it registers: {', '.join(names) or 'none'})")
        return [name]
    if not names:
        raise NelError(f"{path} registers no benchmark: decorate a scorer with @benchmark "
                       "or a class with @register")
    return list(names)


def resolve_benchmark_ref(ref: str) -> str:
    """The registered name a benchmark reference means, importing its file first if it is one.

    As NeMo Evaluator 0.3.0: ``path/to/file.py`` is the one benchmark that file registers,
    ``path/to/file.py:name`` picks one of several. Anything else is returned unchanged (a
    registered name, ``gym://...``).

    Raises:
        NelError: the file is missing, registers none or several without ``:name``, or
            ``name`` is not among the benchmarks it registers.
    """
    path, sep, explicit = ref.rpartition(":")
    if not (sep and path.endswith(".py")):
        path, explicit = ref, ""
    if not path.endswith(".py"):
        return ref
    names = load_benchmark_file(path, explicit or None)
    if len(names) > 1:
        raise NelError(f"{path} registers {len(names)} benchmarks ({', '.join(names)}); "
                       f"pick one with {path}:<name>")
    return names[0]
