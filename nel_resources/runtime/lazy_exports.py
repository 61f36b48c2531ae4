"""`lazy_exports`: a package's public names, each imported from its submodule on first use.

Here, not in `benchmarks`, because importing `benchmarks` runs its package (dozens of
modules) and the packages using this (the proxy, the reference server) are reached from
`nel --help`, which must stay small.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` that import a public name's submodule only
    when the name is first used (`exports`: name -> submodule); the value is then cached in
    the package, so later lookups skip `__getattr__`. Usage in `pkg/__init__.py`::

        __getattr__, __dir__ = lazy_exports(__name__, {"Thing": "things"})
    """
    namespace = sys.modules[package].__dict__

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
