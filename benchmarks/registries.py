"""`Registry`: the one shape of every extension point in nel.

A registry maps a name (a benchmark, a scorer, a solver, a sandbox or cluster type, an
interceptor, an exporter, a harness URI scheme) to the `"module:attr"` that implements it.
The module is imported only when the name is first used, so a run pays nothing for the
kinds it does not use (Docker's client, boto3, Ray), and the table itself imports nothing:
the config package and `nel list` can ask it which names exist without loading any
implementation. An unknown name is a `NelError` naming the nearest known ones.

A kind's module may define more than its registered attribute: `module_attr(name, "preflight")`
finds a sibling function (its checks, its refusal) next to the implementation, so a new
entry is its own module plus one line in its kind's table.

It lives in `benchmarks` (the bottom layer) so every layer above can use it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from benchmarks.errors import NelError

T = TypeVar("T")


class UnknownNameError(NelError, KeyError):
    """A name no registry entry has: says the kind, the nearest names and where to look."""

    def __init__(self, kind: str, name: str, suggestions: list[str], known: list[str],
                 hint: str = "") -> None:
        self.kind, self.name, self.suggestions, self.known, self.hint = (
            kind, name, suggestions, known, hint)
        super().__init__(name)

    def __str__(self) -> str:
        msg = f"unknown {self.kind} {self.name!r}"
        if self.suggestions:
            msg += f"; did you mean {', '.join(repr(s) for s in self.suggestions)}?"
        if self.hint:
            msg += f" ({self.hint})"
        elif self.known:
            msg += f" (known: {', '.join(self.known)})"
        return msg


class Registry(Generic[T]):
    """`name -> "module:attr"`, imported on first use.

    Args:
        kind: what a name is, for messages ("cluster type", "scorer").
        entries: name -> "package.module:attr".
        aliases: other spellings -> a name of `entries`.
        hint: what an unknown-name message says instead of listing every name
            (e.g. "run `nel list` to see all benchmarks").
        fold_case: names match whatever their case.
    """

    def __init__(self, kind: str, entries: Mapping[str, str], *,
                 aliases: Mapping[str, str] | None = None, hint: str = "",
                 fold_case: bool = False) -> None:
        self.kind = kind
        self.hint = hint
        self._fold = fold_case
        self._entries: dict[str, str] = {}
        self._aliases: dict[str, str] = {}
        self._loaded: dict[str, T] = {}
        for name, target in entries.items():
            self.add(name, target)
        for alias, name in (aliases or {}).items():
            self.alias(alias, name)

    # -- the table ----------------------------------------------------------------------
    def add(self, name: str, target: str) -> None:
        """Register `name` as `"module:attr"` (a plugin's entry, or a built-in's)."""
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"a {self.kind} entry must be 'module:attr', got {target!r}")
        key = self._key(name)
        self._entries[key] = target
        self._loaded.pop(key, None)

    def put(self, name: str, obj: T) -> None:
        """Register an object already in hand under `name` (a BYOB benchmark made at run
        time, a plugin's `@register`): it need not be importable by `"module:attr"`."""
        key = self._key(name)
        module = getattr(obj, "__module__", None) or "?"
        qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        self._entries[key] = f"{module}:{qualname}"
        self._loaded[key] = obj

    def alias(self, alias: str, name: str) -> None:
        """Let `alias` stand for the registered `name`."""
        if self._key(name) not in self._entries:
            raise ValueError(f"alias {alias!r} names no registered {self.kind} {name!r}")
        self._aliases[self._key(alias)] = self._key(name)

    # Mapping-style access to the table (name -> "module:attr"), so a registry can stand
    # where a plain `dict` table stood (and tests can `monkeypatch.setitem` an entry).
    def __getitem__(self, name: str) -> str:
        return self.target(name)

    def __setitem__(self, name: str, target: str) -> None:
        self.add(name, target)

    def __delitem__(self, name: str) -> None:
        key = self.canonical(name)
        del self._entries[key]
        self._loaded.pop(key, None)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The `"module:attr"` behind `name`, or `default` when there is no such entry."""
        key = self.canonical_or_none(name)
        return default if key is None else self._entries[key]

    def _key(self, name: str) -> str:
        return name.lower() if self._fold else name

    def names(self, *, aliases: bool = False) -> list[str]:
        """The registered names, sorted (with the aliases too when asked)."""
        return sorted([*self._entries, *(self._aliases if aliases else ())])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical_or_none(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def canonical_or_none(self, name: str) -> str | None:
        """The registered name `name` stands for (itself or an alias's target), or None."""
        key = self._key(name)
        key = self._aliases.get(key, key)
        return key if key in self._entries else None

    def canonical(self, name: str) -> str:
        """The registered name `name` stands for.

        Raises:
            UnknownNameError: no entry and no alias has that name.
        """
        key = self.canonical_or_none(name)
        if key is None:
            raise self.unknown(name)
        return key

    def target(self, name: str) -> str:
        """The `"module:attr"` behind `name`."""
        return self._entries[self.canonical(name)]

    def unknown(self, name: str) -> UnknownNameError:
        """The error for an unknown `name`, with the nearest known names."""
        known = self.names(aliases=True)
        near = difflib.get_close_matches(self._key(name), known, n=3, cutoff=0.6)
        return UnknownNameError(self.kind, name, near, known, self.hint)

    # -- loading ------------------------------------------------------------------------
    def load(self, name: str) -> T:
        """The attribute behind `name`, its module imported now (once)."""
        key = self.canonical(name)
        if key not in self._loaded:
            module, attr = self._entries[key].split(":", 1)
            self._loaded[key] = getattr(importlib.import_module(module), attr)
        return self._loaded[key]

    def module_attr(self, name: str, attr: str, default: Any = None) -> Any:
        """Another attribute of `name`'s module (its `preflight`, its `refusal`), or
        `default` when the module has none."""
        module = self._entries[self.canonical(name)].split(":", 1)[0]
        return getattr(importlib.import_module(module), attr, default)

