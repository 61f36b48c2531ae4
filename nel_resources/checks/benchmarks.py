"""The checks of each `benchmarks:` entry: its name (a harness URI nel lacks), its solver,
its sandbox (the sandbox type's own `refusal`), its scoring, a `container://` harness."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from benchmarks.uri_schemes import is_uri
from nel_resources.checks.deferred import defer, external
from nel_resources.checks.refusal import Refusal, Unavailable, as_config_error, at_key, changed
from nel_resources.config import BenchmarkConfig, NelConfig, SandboxConfig, ScoringMetric
from nel_resources.config._base import field_defaults
from nel_resources.config.unbuilt import (
    BENCH_UNBUILT,
    HARNESS_SCHEMES,
    JUDGE_UNBUILT,
    NEL_EQUIVALENT,
    OPENCLAW_UNBUILT,
    SOLVER_TYPES_UNBUILT,
)

_BENCH_DEFAULTS = field_defaults(BenchmarkConfig)


def check_benchmarks(cfg: NelConfig) -> None:
    """Refuse (raise `Refusal` or `ConfigError`) the first benchmark key that cannot run."""
    for i, b in enumerate(cfg.benchmarks):
        at: tuple[Any, ...] = ("benchmarks", i)
        if is_uri(b.name, "container") or b.solver.type == "container":
            _check_container(cfg, b, at)
        else:
            _check_name(cfg, b.name, (*at, "name"), b.params)
        if b.solver.type in ("harbor", "openclaw"):
            _check_external_agent(cfg, b, at)
        if b.solver.type in SOLVER_TYPES_UNBUILT:
            raise Refusal((*at, "solver", "type"), f"the {b.solver.type!r} solver",
                          "use `type: simple` (one model call per problem), `tool_calling` "
                          "or `gym_delegation`")
        if b.solver.type == "tool_calling":
            _check_tool_calling(cfg, b, at)
        if b.solver.generation is not None:
            raise Refusal((*at, "solver", "generation"), "per-benchmark generation settings",
                          "set them on the service (`services.<name>.generation`)")
        if b.sandbox is not None and b.sandbox not in cfg.sandboxes.values():  # inline block
            check_sandbox_runs_here(cfg, b.sandbox, (*at, "sandbox"))
        for key, what in BENCH_UNBUILT.items():
            if changed(b, key, _BENCH_DEFAULTS):
                raise Refusal((*at, key), what, f"remove `{key}`")
        for j, m in enumerate(b.scoring.metrics if b.scoring else []):
            _check_metric(m, (*at, "scoring", "metrics", j))


def _check_tool_calling(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """`sandbox_tools` needs a sandbox on the benchmark (`resource_service` is checked to be a
    `type: gym` service with a url when the config loads)."""
    if b.solver.sandbox_tools and (b.sandbox is None or b.sandbox.type == "none"):
        raise at_key(cfg, (*at, "solver", "sandbox_tools"),
                     "sandbox tools need a sandbox: add `sandbox: {type: local}` (or "
                     "`{type: docker, image: ...}`) to the benchmark")


def check_sandbox_runs_here(cfg: NelConfig, sb: SandboxConfig, at: tuple[Any, ...]) -> None:
    """One line, before any request, when a sandbox cannot run here: the sandbox type's own
    `refusal(cfg)` says why (no SLURM client, no apptainer binary, no AWS credentials, a bad
    class_path), found next to its `build` in the sandbox table."""
    from nel_resources.sandboxes.factory import SANDBOX_TYPES

    target = SANDBOX_TYPES.get(sb.type)
    if target is None:
        return  # `none`, or a type make_factory refuses with the benchmark's context
    refusal = getattr(importlib.import_module(target.split(":", 1)[0]), "refusal", None)
    r = refusal(sb) if refusal is not None else None
    if r is None:
        return
    if r.unbuilt:
        raise Refusal((*at, r.key), r.why, r.instead)
    err = at_key(cfg, (*at, r.key), f"{sb.type} sandbox cannot run here: {r.why}")
    if r.needs is None:
        raise err
    external(r.needs, err)  # AWS credentials...: a dry run lists the check instead


def _check_container(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """A `container://image#task` harness runs when its image is in the local Docker engine;
    what the harness decides itself (problems, repeats, shards) is refused on nel's side."""
    if not is_uri(b.name, "container"):
        raise Refusal((*at, "name"), "`solver.type: container` without a harness image",
                      "name the benchmark `container://<image>#<task>`")
    from benchmarks.uri_schemes import parse_container
    from nel_resources.images.harness_image import missing_image_reason
    from nel_resources.specs import n_shards

    try:
        image, _ = parse_container(b.name)
    except Exception as exc:
        raise Refusal((*at, "name"), str(exc), "fix the name") from None
    for key, fix in (("max_problems", "set `params.limit_samples` for the harness"),
                     ("repeats", "set the harness's own repeats in `params`"),
                     ("problem_range", "set the harness's own selection in `params`")):
        if changed(b, key, _BENCH_DEFAULTS):
            raise Refusal((*at, key), f"`{key}` on a container:// benchmark (the harness picks "
                          "its problems)", fix)
    if n_shards(cfg, b) > 1:
        raise Refusal((*at, "name"), "sharding a container:// benchmark (the harness is one run)",
                      "remove the shard count (`shards` / `cluster.shards`) for this benchmark")
    # The engine is asked by the run only: a dry run plans without one (as NeMo Evaluator's).
    if defer("docker", f"image {image!r} is in the local Docker engine (nel never pulls)"):
        return
    why = missing_image_reason(image)
    if why:
        raise at_key(cfg, (*at, "name"), why)


def _check_external_agent(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """`harbor` and `openclaw` run an agent program nel does not ship: say what is missing
    (a dry run lists the program as a check the run makes: it runs where the run runs)."""
    import shutil

    if b.solver.type == "harbor":
        _check_harbor(cfg, b, at)
        return
    binary = b.solver.openclaw_bin
    # `skip_preflight` (NeMo Evaluator's) skips the checks of what the run's machine has
    # (the CLI, the search key): a run without them fails per sample instead
    in_image = b.sandbox is not None and b.sandbox.type == "ecs_fargate"  # the image has it
    if not b.solver.skip_preflight and not in_image and shutil.which(binary) is None:
        external("program", as_config_error(cfg, Unavailable((*at, "solver", "openclaw_bin"), f"the 'openclaw' solver cannot run "
                          f"here: the OpenClaw CLI `{binary}` is not on PATH", "install it with "
                          "`make peers` (deploy/agents/install_openclaw.sh) and put "
                          "`.venv-peers/openclaw/bin` on PATH or give its path in `openclaw_bin`, "
                          "or use `solver.type: tool_calling`")))
    _check_openclaw(b, at)
    _check_openclaw_inputs(cfg, b, at)


def _check_openclaw_inputs(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """The search key (by name, never its value) and the user's `openclaw.json`."""
    import os

    from nel_resources.web_search import KEY_ENV

    key_env = KEY_ENV.get(b.solver.web_search_provider or "", "")
    if key_env and not b.solver.skip_preflight and not os.environ.get(key_env):
        external("secret", as_config_error(cfg, Unavailable(
            (*at, "solver", "web_search_provider"), f"web_search_provider: "
            f"{b.solver.web_search_provider} needs {key_env} set in the environment (the "
            "search provider's key)", f"export {key_env}, or remove `web_search_provider`")))
    path = b.solver.config_path
    if path and not Path(path).expanduser().is_file():
        external("data", as_config_error(cfg, Unavailable(
            (*at, "solver", "config_path"), f"config_path {path!r} is not a file",
            "give the path of your openclaw.json")))


def _check_harbor(cfg: NelConfig, b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """A Harbor agent runs in Harbor's own venv (Python >= 3.12), in the sample's sandbox."""
    from nel_resources.runtime.harbor_install import harbor_python

    if harbor_python(b.solver.harbor_bin) is None:
        external("program", as_config_error(cfg, Unavailable((*at, "solver", "harbor_bin"), f"the 'harbor' solver cannot run "
                          f"here: Harbor's CLI `{b.solver.harbor_bin}` is not on PATH",
                          "install it with `make peers` (Harbor 0.24.0 in a Python 3.12 venv) "
                          "and put `.venv-peers/harbor/bin` on PATH or give its path in "
                          "`harbor_bin`")))
    if b.sandbox is None or b.sandbox.type == "none":
        raise Unavailable((*at, "sandbox"), "the 'harbor' solver runs its agent in the "
                          "sample's sandbox and this benchmark has none",
                          "add `sandbox: {type: docker}` (the task's image) or `{type: local}`")
    if b.solver.skill_dir and not Path(b.solver.skill_dir).expanduser().is_dir():
        # the skill's files are the run's data: a dry run (elsewhere) lists the check
        external("data", as_config_error(cfg, Unavailable(
            (*at, "solver", "skill_dir"), f"skill_dir {b.solver.skill_dir!r} is not a directory",
            "give the skill's local directory")))


def _check_openclaw(b: BenchmarkConfig, at: tuple[Any, ...]) -> None:
    """The OpenClaw CLI runs on this machine, outside any sandbox, with the keys it honours."""
    for key, (what, fix) in OPENCLAW_UNBUILT.items():
        if key in b.solver.model_fields_set and getattr(b.solver, key) not in (None, False):
            raise Refusal((*at, "solver", key), what, fix)
    # In `docker` nel mounts the host's OpenClaw into the container; in `ecs_fargate` the
    # image brings it (0.3.0's). Elsewhere nothing puts OpenClaw into the sandbox yet.
    if b.sandbox is not None and b.sandbox.type not in ("none", "docker", "ecs_fargate"):
        raise Refusal((*at, "sandbox", "type"), f"the 'openclaw' solver in a "
                      f"{b.sandbox.type} sandbox (nel runs it in `docker`, with the host's "
                      "OpenClaw mounted in, or in `ecs_fargate`, from OpenClaw's image)",
                      "use `type: docker` or `ecs_fargate`, or remove `sandbox`")


def _check_harbor_name(cfg: NelConfig, name: str, at: tuple[Any, ...]) -> None:
    """`harbor://name@version` runs from its local task cache; without one it is refused
    (the Harbor registry cannot be reached from here). A dry run plans it and says where the
    data must be put."""
    from benchmarks.agentic import harbor_cache_dir

    d = harbor_cache_dir(name.removeprefix("harbor://"))
    if not d.is_dir():
        external("data", as_config_error(cfg, Unavailable(at, f"benchmark {name!r} cannot be had here: there is no local "
                          f"Harbor task cache at {d} and nel does not reach the Harbor registry "
                          "(it downloads nothing)",
                          "copy the dataset's task directories there (or set HARBOR_DATASETS_DIR "
                          "to the folder holding it)")))


def _check_skills_name(cfg: NelConfig, name: str, params: dict[str, Any], at: tuple[Any, ...]) -> None:
    """`skills://NAME` runs from Skills' prepared data in a local directory; without the
    file it is refused in the one line that says which file to put where (a dry run plans it
    and lists that check)."""
    from benchmarks.errors import NelError
    from benchmarks.skills import require_data

    try:
        require_data(name, params.get("data_dir"), params.get("split"))
    except NelError as exc:
        what, _, fix = str(exc).partition(": put ")
        external("data", as_config_error(cfg, Unavailable(at, what, f"put {fix}" if fix else str(exc))))


def _check_name(cfg: NelConfig, name: str, at: tuple[Any, ...],
                params: dict[str, Any] | None = None) -> None:
    scheme = name.split("://", 1)[0] if "://" in name else None
    if scheme is None or scheme == "gym":
        return
    if scheme == "harbor":
        _check_harbor_name(cfg, name, at)
        return
    if scheme == "skills":
        _check_skills_name(cfg, name, params or {}, at)
        return
    if scheme == "vlmevalkit":  # runs from VLMEvalKit's TSV in a local folder
        from benchmarks.vlmevalkit import missing_file

        missing = missing_file(name.removeprefix("vlmevalkit://"))
        if missing is not None:
            external("data", as_config_error(cfg, Unavailable(at, *missing)))
        return
    if scheme == "lm-eval":  # the optional package must be there; the task is checked on load
        from benchmarks.lm_eval import require_lm_eval

        try:
            require_lm_eval()
        except NelError as exc:
            raise Unavailable(at, str(exc), "pip install 'nel[lm-eval]'") from None
        return
    same = NEL_EQUIVALENT.get(name)
    instead = (f"nel has the same benchmark built in: write `name: {same}`" if same else
               "see `nel list` for the benchmarks nel has, or write your own (BYOB)")
    what = HARNESS_SCHEMES.get(scheme, f"{scheme}:// benchmarks")
    raise Refusal(at, f"benchmark {name!r} ({what})", instead)


def _check_metric(m: ScoringMetric, at: tuple[Any, ...]) -> None:
    if m.type not in ("scorer", "judge"):
        raise Refusal((*at, "type"), f"{m.type!r} metrics", "use `type: scorer` or `type: judge`")
    if m.type == "judge":
        for key in JUDGE_UNBUILT:
            if getattr(m, key) is not None:
                raise Refusal((*at, key), f"the judge option `{key}`",
                              f"remove `{key}` (nel's judge uses its built-in rubric)")
