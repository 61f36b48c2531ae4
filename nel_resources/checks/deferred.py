"""Checks that need what only a run has (data, a Docker engine and its images, AWS, an agent
CLI installed on the run's machine): a run makes them and refuses in one line; a dry run
(`nel eval run --dry-run`, inside `deferring_external_checks`) records each one instead and
lists it in the plan as a check the run will make.

One resolution path: the run and the dry run call the same checks; only the checks that call
`external` can be deferred, and only by a dry run. NeMo Evaluator 0.3.0's dry run asks none of
these resources either (it renders the plan and the scripts).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class DeferredCheck:
    """A check the run makes and the dry run could not: what it needs and its message."""

    needs: str  # "data", "docker", "aws", "program", "server", "secret"
    message: str  # the one line the run refuses with when the resource is missing

    def line(self) -> str:
        """`needs <what> at run time: <message>`, as the plan prints it."""
        return f"checked at run time ({_NEEDS.get(self.needs, self.needs)}): {self.message}"


_NEEDS = {"data": "needs the data here", "docker": "needs the Docker engine and its images",
          "aws": "needs AWS", "program": "needs the program installed",
          "server": "needs the server up", "secret": "needs the key in the environment"}
_COLLECTING: ContextVar[list[DeferredCheck] | None] = ContextVar("nel_deferred_checks",
                                                                 default=None)


@contextmanager
def deferring_external_checks() -> Iterator[list[DeferredCheck]]:
    """Within: `external` records its check instead of raising (a dry run)."""
    found: list[DeferredCheck] = []
    token = _COLLECTING.set(found)
    try:
        yield found
    finally:
        _COLLECTING.reset(token)


def is_deferring() -> bool:
    """Whether a dry run is collecting external checks (then nothing external is asked)."""
    return _COLLECTING.get() is not None


def external(needs: str, err: Exception) -> None:
    """A check that needs an external resource failed (or cannot be asked): raise `err` in a
    run; in a dry run record it (once) and return, so the rest of the config is checked.

    Raises:
        Exception: `err`, unless a dry run is collecting.
    """
    found = _COLLECTING.get()
    if found is None:
        raise err
    check = DeferredCheck(needs, str(err))
    if check not in found:
        found.append(check)


def has_deferred(needs: str, mentioning: str) -> bool:
    """Whether a dry run already listed a `needs` check whose line names `mentioning` (a
    benchmark): its later symptoms add no line."""
    return any(c.needs == needs and mentioning in c.message for c in _COLLECTING.get() or [])


def defer(needs: str, message: str) -> bool:
    """In a dry run, record a check that would need an external resource without asking it
    (AWS, a registry) and return True; in a run return False (the caller asks)."""
    found = _COLLECTING.get()
    if found is None:
        return False
    check = DeferredCheck(needs, message)
    if check not in found:
        found.append(check)
    return True
