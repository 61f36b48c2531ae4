"""The `nemo_evaluator` import paths of NeMo Evaluator 0.3.0, served by nel's own modules.

A benchmark file written for NeMo Evaluator (`from nemo_evaluator import benchmark, scorer,
ScorerInput, exact_match` or `from nemo_evaluator.environments import EvalEnvironment,
register`) must load unchanged, without nel adding a `nemo_evaluator` package to its
layout. `install_nemo_imports()` puts a finder at the front of `sys.meta_path` that answers
for `nemo_evaluator` and the submodules its docs name; each attribute is taken lazily
from the nel module that implements it (the table below), so `nel serve` still imports
no engine code unless a file asks for, say, `run_evaluation`.

Which wins when the real `nemo_evaluator` is importable too: nel's, inside nel. A file
nel loads must register nel's classes in nel's registry; the real package's `@register`
would fill a registry nel never reads and its `SeedResult` would not be nel's. So the
finder goes first in `sys.meta_path`, and if the real package was already imported in
the process (its modules are cached and a finder is no longer asked), loading stops with
one clear line instead of mixing the two. (The real 0.3.0 needs Python 3.12; nel runs on
3.11, so in practice it is not in nel's environment at all.)

Names for features nel has not built yet (sandbox image builds, judge post-processing
from a scorer, the NAT and oracle solvers) are refused at import, before any
request, with one line naming them; so are the classes of solvers nel runs from the config
(`tool_calling`, `gym_delegation`, `openclaw`, `harbor`), with the `solver:` to write instead.

This table names modules of higher layers (`nel_assets`, `nel_resources`) as strings,
imported only when a user file asks for those names: it is the public-API mapping, not a
dependency of `benchmarks/`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

from benchmarks.errors import NelError

ROOT = "nemo_evaluator"

# The API level these paths follow (user code sometimes checks it).
API_VERSION = "0.3.0"

_TYPES = "benchmarks._types"
_REG = "benchmarks._registry"
_BYOB = "benchmarks.byob"
_API = "nel_assets.engine.nemo.evaluation_api"
_SOLVERS = "nel_assets.engine.solvers"
_CLIENT = "nel_resources.model_client"
_RUNS = "nel_assets.engine.results.runs"
_PROGRESS = "nel_assets.engine.nemo.progress"

_CORE = {"EvalEnvironment": _TYPES, "SeedResult": _TYPES, "VerifyResult": _TYPES}
_REGISTRY = {"register": _REG, "get_environment": _REG, "list_environments": _REG}
_SCORING = {**{n: _BYOB for n in ("ScorerInput", "exact_match", "fuzzy_match", "multichoice_regex",
                                   "answer_line", "numeric_match")},
            "code_sandbox": "benchmarks.scoring.code", "code_sandbox_async": "benchmarks.scoring.code"}
_SOLVER_NAMES = {n: _SOLVERS for n in ("Solver", "SolveResult", "ChatSolver", "CompletionSolver",
                                        "VLMSolver")}
_ENGINE = {"run_evaluation": _API, "write_all": _API, "ModelClient": f"{_CLIENT}:NemoModelClient",
           "compare_runs": _RUNS, "write_regression": _RUNS}

# module -> {attribute: "module" or "module:attribute"}
MODULES: dict[str, dict[str, str]] = {
    ROOT: {**_CORE, **_REGISTRY, "load_benchmark_file": "benchmarks.plugins",
           "benchmark": _BYOB, "scorer": _BYOB, **_SCORING, **_SOLVER_NAMES,
           "run_evaluation": _API, "ModelClient": f"{_CLIENT}:NemoModelClient"},
    f"{ROOT}.environments": {**_CORE, **_REGISTRY, "benchmark": _BYOB, "scorer": _BYOB},
    f"{ROOT}.environments.base": dict(_CORE),
    f"{ROOT}.environments.custom": {"benchmark": _BYOB, "scorer": _BYOB, **_CORE,
                                    "ScorerInput": _BYOB},
    f"{ROOT}.environments.registry": {**_REGISTRY, "load_benchmark_file": "benchmarks.plugins"},
    f"{ROOT}.environments.gym": {"GymEnvironment": "benchmarks.remote"},
    f"{ROOT}.scoring": dict(_SCORING),
    f"{ROOT}.scoring.types": {"ScorerInput": _BYOB},
    f"{ROOT}.scoring.code_execution": {"code_sandbox": "benchmarks.scoring.code",
                                       "code_sandbox_async": "benchmarks.scoring.code"},
    f"{ROOT}.scoring.text": {"exact_match": _BYOB, "fuzzy_match": _BYOB},
    f"{ROOT}.scoring.pattern": {"answer_line": _BYOB, "multichoice_regex": _BYOB,
                                "numeric_match": _BYOB},
    f"{ROOT}.engine": dict(_ENGINE),
    f"{ROOT}.engine.eval_loop": {"run_evaluation": _API},
    f"{ROOT}.engine.model_client": {"ModelClient": f"{_CLIENT}:NemoModelClient"},
    f"{ROOT}.engine.artifacts": {"write_all": _API},
    f"{ROOT}.engine.comparison": {"compare_runs": _RUNS, "write_regression": _RUNS},
    f"{ROOT}.serving": {"generate_app": "benchmarks.serve"},
    f"{ROOT}.serving.app": {"generate_app": "benchmarks.serve"},
    f"{ROOT}.observability": {"ModelResponse": _CLIENT, "ProgressTracker": _PROGRESS,
                              "NoOpProgress": _PROGRESS, "ConsoleProgress": _PROGRESS},
    f"{ROOT}.observability.types": {"ModelResponse": _CLIENT},
    f"{ROOT}.observability.progress": {"ProgressTracker": _PROGRESS, "NoOpProgress": _PROGRESS,
                                       "ConsoleProgress": _PROGRESS},
    f"{ROOT}.solvers": dict(_SOLVER_NAMES),
    f"{ROOT}.solvers.base": {"Solver": _SOLVERS, "SolveResult": _SOLVERS},
    f"{ROOT}.solvers.chat": {"ChatSolver": _SOLVERS},
    f"{ROOT}.solvers.completion": {"CompletionSolver": _SOLVERS},
    f"{ROOT}.solvers.vlm": {"VLMSolver": _SOLVERS},
    f"{ROOT}.environments.vlmevalkit": {"VLMEvalKitEnvironment": "benchmarks.vlmevalkit"},
}

_SANDBOX = ("NeMo Evaluator's sandbox classes are not provided by nel (give the benchmark a "
            "`sandbox:` block; a scorer gets it as `sample.sandbox`)")
_SOLVER = "solvers other than `simple` (chat/completion) are not supported yet in nel"
# Solvers nel runs from the config, not as NeMo Evaluator's Python classes.
_CONFIG_SOLVER = ("nel runs this solver from the config, not as NeMo Evaluator's Python class: "
                  "set `solver: {{type: {kind}, ...}}` on the benchmark")
# Names NeMo Evaluator exports for features nel has not built yet.
REFUSED: dict[str, str] = {
    "image_builder": "sandbox image builds (image_builder) are not supported yet in nel",
    "needs_judge": "judge post-processing requested by a BYOB scorer (needs_judge) is not "
                   "supported yet in nel",
    "NatSolver": _SOLVER,
    "OpenClawSolver": _CONFIG_SOLVER.format(kind="openclaw"),
    "HarborSolver": _CONFIG_SOLVER.format(kind="harbor"),
    "ReActSolver": _CONFIG_SOLVER.format(kind="tool_calling"),
    "OracleSolver": _SOLVER,
}


_HARNESS = "external-harness environments are not supported yet in nel"
# NeMo Evaluator modules for features nel has not built yet (prefix match).
REFUSED_MODULES: dict[str, str] = {
    f"{ROOT}.sandbox": _SANDBOX,
    f"{ROOT}.adapters": "interceptors and the adapter proxy are not supported yet in nel",
    f"{ROOT}.engine.exporters": "exporters are not supported yet in nel",
    f"{ROOT}.orchestration": "cluster launching (other than local) is not supported yet in nel",
    f"{ROOT}.executors": "cluster launching (other than local) is not supported yet in nel",
    **{f"{ROOT}.environments.{m}": _HARNESS
       for m in ("harbor", "container", "skills", "lm_eval")},
    **{f"{ROOT}.solvers.{m}": _SOLVER for m in ("nat", "oracle", "byob_agent")},
    **{f"{ROOT}.solvers.{m}": _CONFIG_SOLVER.format(kind=kind)
       for m, kind in (("openclaw", "openclaw"), ("harbor", "harbor"),
                       ("gym", "gym_delegation"), ("react", "tool_calling"))},
}


class NemoImportError(NelError, ImportError):
    """A `nemo_evaluator` name or module nel does not provide (or not yet)."""


class NemoRefusedNameError(NelError, AttributeError):
    """A refused `nemo_evaluator` attribute read with `getattr`: an AttributeError, so
    `getattr(module, name, default)` and `hasattr` behave as with any missing name, with
    the one line saying why (a `from ... import` of it still fails with that line)."""


class _AliasModule(types.ModuleType):
    """A `nemo_evaluator*` module whose attributes come lazily from nel's modules."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        table = MODULES.get(self.__name__, {})
        target = table.get(attr)
        if target is None:
            if attr in REFUSED:
                raise NemoRefusedNameError(f"{self.__name__}.{attr}: {REFUSED[attr]}")
            raise AttributeError(f"module {self.__name__!r} (served by nel) has no attribute "
                                 f"{attr!r}; it provides: {', '.join(sorted(table)) or 'nothing'}")
        mod_name, _, real = target.partition(":")
        value = getattr(importlib.import_module(mod_name), real or attr)
        setattr(self, attr, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(MODULES.get(self.__name__, {})))


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        if name not in MODULES:
            parent, _, leaf = name.rpartition(".")
            for prefix, why in REFUSED_MODULES.items():
                if name == prefix or name.startswith(prefix + "."):
                    raise NemoImportError(f"{name}: {why}")
            if leaf in REFUSED:
                raise NemoImportError(f"{name}: {REFUSED[leaf]}")
            if parent in MODULES:
                # `from nemo_evaluator.scoring import get_scorer` lands here too: Python
                # tries a submodule when the attribute is missing.
                raise NemoImportError(
                    f"{name}: nel does not provide {leaf!r} ({parent} provides "
                    f"{', '.join(sorted(MODULES[parent]))})")
            raise NemoImportError(f"import {name}: nel does not provide this NeMo Evaluator module "
                                  f"(it provides {', '.join(sorted(MODULES))})")
        module.__all__ = sorted(MODULES[name])  # type: ignore[attr-defined]
        module.__doc__ = f"NeMo Evaluator 0.3.0's `{name}`, served by nel's modules."
        if name == ROOT:
            module.__version__ = API_VERSION  # type: ignore[attr-defined]
            module.__package_name__ = ROOT  # type: ignore[attr-defined]


class NemoImportFinder(importlib.abc.MetaPathFinder):
    """Answers imports of `nemo_evaluator` and its submodules with nel's alias modules."""

    _loader = _Loader()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self._loader, is_package=True)
        spec.submodule_search_locations = []
        return spec


_FINDER = NemoImportFinder()


def install_nemo_imports() -> None:
    """Serve the `nemo_evaluator` import paths from nel (idempotent).

    Raises:
        NelError: the real NeMo Evaluator package is already imported in this process.
    """
    loaded = sys.modules.get(ROOT)
    if loaded is not None and not isinstance(loaded, _AliasModule):
        raise NelError("the real nemo_evaluator package is already imported in this process; "
                       "nel serves the nemo_evaluator import paths itself: let nel load the "
                       "benchmark files (do not import nemo_evaluator before that)")
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def find_fallback_spec(fullname: str, path: Sequence[str] | None = None,
                       target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
    """The spec of nel's `nemo_evaluator` paths, for the finder `nel_nemo_evaluator.pth` puts
    last in `sys.meta_path` at interpreter start: asked only when no other finder (a real
    NeMo Evaluator install) answered, so `import nemo_evaluator` in a user's script works in
    nel's environment with no extra lines."""
    return _FINDER.find_spec(fullname, path, target)


__all__ = ["MODULES", "REFUSED", "REFUSED_MODULES", "NemoImportError", "NemoImportFinder", "NemoRefusedNameError", "find_fallback_spec", "install_nemo_imports"]
