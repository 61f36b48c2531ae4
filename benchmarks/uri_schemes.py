"""Benchmark URI schemes nel runs: `gym://host:port`, `harbor://name@version`, `container://image#task`,
`skills://name`, `lm-eval://task`.

What kind of benchmark a name is gets decided here, once: `scheme_of(name)` asks the
`SCHEMES` registry instead of each caller testing prefixes. Each entry names what makes
that kind of benchmark from its URI (a remote environment, a factory over a local task
cache, the harness image's parser); the schemes of harnesses nel does not run are the
config's "not built" table, not entries here.

A new scheme is one line here plus its own module.
"""

from __future__ import annotations

from typing import Any

from benchmarks.errors import NelError
from benchmarks.registries import Registry

SCHEMES: Registry[Any] = Registry("benchmark URI scheme", {
    "gym": "benchmarks.remote:GymEnvironment",  # a NeMo Gym resource server over HTTP
    "harbor": "benchmarks.agentic.builtins:harbor_uri_factory",  # a local Harbor cache
    # NeMo Skills' prepared data and prompt configs in a local directory, Skills' graders
    "skills": "benchmarks.skills.environment:skills_uri_factory",
    # a harness image run by the engine's `container` solver: (image, task) from the name
    "container": "benchmarks.uri_schemes:parse_container",
    # a VLMEvalKit dataset from its local TSV file (`NEL_VLMEVALKIT_DIR` / `LMUData`)
    "vlmevalkit": "benchmarks.vlmevalkit:vlmevalkit_factory",
    # an lm-evaluation-harness task on local data (the optional `lm-eval` package)
    "lm-eval": "benchmarks.lm_eval:lm_eval_uri_factory",
})


def scheme_of(name: str) -> str | None:
    """The registered scheme of a `scheme://...` benchmark name, or None (a plain name, a
    file, or a scheme nel does not run)."""
    scheme, sep, _ = name.partition("://")
    return scheme if sep and scheme in SCHEMES else None


def is_uri(name: str, *schemes: str) -> bool:
    """True when `name` is a URI of a registered scheme (of one of `schemes`, if given)."""
    scheme = scheme_of(name)
    return scheme is not None and (not schemes or scheme in schemes)


def parse_container(name: str) -> tuple[str, str]:
    """`container://image[:tag]#task` -> (image, task).

    Raises:
        NelError: when the image or the task is missing.
    """
    rest = name.removeprefix("container://")
    image, _, task = rest.partition("#")
    if not image or not task:
        raise NelError(f"benchmark {name!r}: write `container://<image>#<task>` (the image and "
                       "the harness task it runs)")
    return image, task
