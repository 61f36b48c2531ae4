"""Reading a config: `${ENV}` expansion, composition, `-O` overrides and precise errors.

Every error names the file, the line and the key, and says what to write instead.
"""

from __future__ import annotations

import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from nel_resources.config._base import ConfigError, closest
from nel_resources.config.compose import (
    compose,
    resolve_playbooks,
    resolve_self_refs,
    strip_variables,
)
from nel_resources.config.model import NelConfig
from nel_resources.config.reading import (
    MAX_CONFIG_BYTES,
    MAX_YAML_NODES,
    check_yaml_depth,
    check_yaml_size,
    read_config_text,
)

__all__ = ["MAX_CONFIG_BYTES", "MAX_YAML_NODES", "apply_override", "check_yaml_size",
           "expand_env", "load_config", "parse_override", "read_config_text"]

# `${VAR}`, `${VAR-default}`, `${VAR:-default}`, `${VAR?message}`, `${VAR:?message}` (the
# shell's forms: with `:` an empty value counts as unset).
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}")
# Any other `${...}` left after expansion, except a `${.a.b}` reference to another value.
_OTHER_REF_RE = re.compile(r"\$\{(?!\.[A-Za-z0-9_.]+\})[^}\n]{0,60}\}?")
_ESCAPED = "\x00nel-escaped-dollar\x00"
# Maps keyed by a user-chosen name: `-O` may set keys inside an entry only when it exists.
_NAMED_MAPS = {("services",): "service", ("sandboxes",): "sandbox",
               ("cluster", "node_pools"): "node pool"}
# Other accepted spellings of a key (normalised by the models), offered as valid keys too.
_ALIASES = {"fewshot", "extra_env", "exports", "temperature", "top_p", "max_tokens", "seed",
            "stop", "frequency_penalty", "presence_penalty"}


def expand_env(text: str, *, where: str = "config") -> str:
    """Replace `${VAR}`, `${VAR:-default}` and `${VAR:?message}` as a shell does.

    An unset variable without a default is an error, as is any other `${...}` form (a
    literal `${...}` is written `$${...}`): nothing is left in the config as literal text.
    """

    def line_of(m: re.Match[str]) -> int:
        return text.count("\n", 0, m.start()) + 1

    def sub(m: re.Match[str]) -> str:
        name, colon, op, arg = m.group(1), m.group(2), m.group(3), m.group(4)
        val = os.environ.get(name)
        unset = val is None or (val == "" and colon == ":")
        if not unset:
            return val or ""
        if op == "-":
            return arg
        if op == "?":
            why = f": {arg.strip()}" if arg and arg.strip() else ""
            raise ConfigError(f"{where}:{line_of(m)}: environment variable {name} is "
                              f"{'empty' if val == '' else 'not set'}{why}")
        raise ConfigError(
            f"{where}:{line_of(m)}: environment variable {name} is not set "
            f"(export it, or write ${{{name}:-default}})"
        )

    # `$${VAR}` is a literal `${VAR}` left for a later shell (as in NeMo Evaluator).
    protected = text.replace("$${", _ESCAPED)
    # Looked for in the text as written (a variable's value may hold `${` legitimately);
    # each expandable reference is blanked to its newlines so line numbers stay right.
    written = _ENV_RE.sub(lambda m: "\n" * m.group(0).count("\n"), protected)
    other = _OTHER_REF_RE.search(written)
    if other:
        line = written.count("\n", 0, other.start()) + 1
        raise ConfigError(
            f"{where}:{line}: {other.group(0)!r} is not a reference nel can expand (use "
            "${VAR}, ${VAR:-default}, ${VAR:?message} or ${.path.to.key}; write $${ for a "
            "literal ${)")
    return _ENV_RE.sub(sub, protected).replace(_ESCAPED, "${")


def _line_map(node: yaml.Node, path: tuple[Any, ...] = (), out: dict | None = None) -> dict:
    """Map each key path to the 1-based line where it appears in the YAML."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[(*path, key)] = k.start_mark.line + 1
            _line_map(v, (*path, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, (*path, i), out)
    return out


def parse_override(expr: str) -> tuple[list[str | int], Any]:
    """`a.b[0].c=v` or `a.b.0.c=v` -> (path, YAML-parsed value)."""
    if "=" not in expr:
        raise ConfigError(f"override {expr!r}: expected KEY=VALUE (e.g. -O benchmarks.0.repeats=3)")
    key, raw = expr.split("=", 1)
    parts: list[str | int] = []
    for tok in re.split(r"\.|\[|\]", key.strip()):
        if tok == "":
            continue
        parts.append(int(tok) if tok.isdigit() else tok)
    if not parts:
        raise ConfigError(f"override {expr!r}: empty key")
    try:
        if raw.strip():
            check_yaml_depth(raw, f"override {key.strip()}")
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_override(data: dict[str, Any], expr: str) -> None:
    """Set one `-O` override in the raw config dict (creating maps as needed)."""
    path, value = parse_override(expr)
    _refuse_undefined_entry(data, path, expr)
    cur: Any = data
    for i, p in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(cur, list):
            if not isinstance(p, int) or p >= len(cur):
                raise ConfigError(f"override {expr!r}: index {p} out of range (list has {len(cur)})")
            cur = cur[p]
        else:
            if p not in cur or cur[p] is None:
                cur[p] = [] if isinstance(nxt, int) else {}
            cur = cur[p]
    last = path[-1]
    if isinstance(cur, list):
        if not isinstance(last, int) or last > len(cur):
            raise ConfigError(f"override {expr!r}: index {last} out of range (list has {len(cur)})")
        if last == len(cur):
            cur.append(value)
        else:
            cur[last] = value
    elif isinstance(cur, dict):
        cur[last] = value
    else:
        raise ConfigError(f"override {expr!r}: {'.'.join(map(str, path[:-1]))} is not a mapping")


def _refuse_undefined_entry(data: dict[str, Any], path: list[str | int], expr: str) -> None:
    """`-O services.nope.url=...` must not create a half-defined service `nope`."""
    for prefix, what in _NAMED_MAPS.items():
        n = len(prefix)
        if len(path) <= n + 1 or tuple(path[:n]) != prefix:
            continue
        cur: Any = data
        for p in prefix:
            cur = cur.get(p) if isinstance(cur, dict) else None
        names = sorted(cur) if isinstance(cur, dict) else []
        if path[n] not in names:
            near = closest(str(path[n]), [str(x) for x in names])
            hint = f"did you mean {near!r}? " if near else ""
            raise ConfigError(
                f"override {expr!r}: there is no {what} {path[n]!r} in the config (defined: "
                f"{', '.join(map(str, names)) or 'none'}); {hint}define it in the config, or set "
                f"the whole block with -O {'.'.join(map(str, path[:n + 1]))}={{...}}")



def _model_fields_at(loc: tuple[Any, ...]) -> set[str]:
    """Field names (and accepted aliases) of the model found at `loc` in `NelConfig`."""
    tp: Any = NelConfig
    for part in loc:
        tp = _unwrap(tp, part)
        if tp is None:
            return set()
    tp = _unwrap(tp, None)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return set(tp.model_fields) | _ALIASES
    return set()


def _unwrap(tp: Any, part: Any) -> Any:
    """One step down a type: a model's field, a list item or a dict value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                continue
            got = _unwrap(arg, part)
            if got is not None:
                return got
        return None
    if part is None:
        return tp
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return field.annotation if field else None
    if origin in (list, tuple) and isinstance(part, int):
        return typing.get_args(tp)[0]
    if origin is dict:
        return typing.get_args(tp)[1]
    return None


def _format_validation(exc: ValidationError, where: str, lines: dict) -> str:
    msgs = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        typ = err["type"]
        if typ == "nel_key":
            # A model-level check about one key inside it (see `_base.key_error`).
            extra = str((err.get("ctx") or {}).get("key", ""))
            loc = loc + tuple(int(p) if p.isdigit() else p for p in extra.split(".") if p)
        # Union members tried by pydantic are not keys of the YAML: keep the path to them.
        line = None
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                line = lines[loc[:n]]
                break
        key = ".".join(str(p) for p in loc) or "(top level)"
        if typ == "extra_forbidden":
            near = closest(str(loc[-1]), _model_fields_at(loc[:-1])) if loc else None
            text = f"unknown key {key!r}" + (f"; did you mean {near!r}?" if near else "")
        elif typ == "missing":
            text = f"missing required key {key!r}"
        elif typ == "nel_key":
            text = f"{key}: {err['msg']}"
        else:
            text = f"{key}: {err['msg'].removeprefix('Value error, ')}"
            if "input" in err and typ != "value_error" and not isinstance(err["input"], dict):
                text += f" (got {err['input']!r})"[:200]
        msgs.append(f"{where}:{line or '?'}: {text}")
    return "; ".join(msgs)


_WHOLE_REF_RE = re.compile(r"^\$\{(\w+)\}$")


def _keep_secret_references(data: dict[str, Any], raw: Any) -> None:
    """Keep `${VAR}` references to secrets instead of their values.

    `api_key: ${VAR}` becomes `api_key_env: VAR`, and a header written with `${VAR}` keeps
    its template (expanded when requests are made, see `ServiceConfig.resolved_headers`):
    a config saved from this one (`<out>/nel-config.yaml`) then authenticates wherever
    it is run, and never holds the secret itself.
    """
    services = data.get("services")
    raw_services = raw.get("services") if isinstance(raw, dict) else None
    if not isinstance(services, dict) or not isinstance(raw_services, dict):
        return
    for name, svc in services.items():
        raw_svc = raw_services.get(name)
        if not isinstance(svc, dict) or not isinstance(raw_svc, dict):
            continue
        ref = raw_svc.get("api_key")
        m = _WHOLE_REF_RE.match(ref) if isinstance(ref, str) else None
        if m and not svc.get("api_key_env"):
            svc.pop("api_key", None)
            svc["api_key_env"] = m.group(1)
        headers, raw_headers = svc.get("headers"), raw_svc.get("headers")
        if isinstance(headers, dict) and isinstance(raw_headers, dict):
            for key, value in raw_headers.items():
                if isinstance(value, str) and "${" in value and key in headers:
                    headers[key] = value


def _read_yaml(p: Path, where: str, text: str | None = None) -> tuple[Any, dict]:
    """One YAML file (or its `text`, already read): expanded, bounded and parsed, with its
    key -> line map."""
    text = expand_env(read_config_text(p) if text is None else text, where=where)
    try:
        check_yaml_depth(text, where)
        node = yaml.compose(text)
        if node is not None:
            check_yaml_size(node, where)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}:{line}: invalid YAML: {problem}") from None
    return data, (_line_map(node) if node is not None else {})


def _load_fragment(p: Path) -> dict[str, Any]:
    data, _ = _read_yaml(p, str(p))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}:1: a config fragment must be a mapping")
    return data


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: list[str] | None = None,
    data: dict[str, Any] | None = None,
    source: NelConfig | None = None,
) -> NelConfig:
    """Read, expand, compose, override and validate a config.

    Args:
        path: YAML file (or None with `data`).
        overrides: `-O key.path=value` expressions, applied after env expansion.
        data: a raw config dict to use instead of a file.
        source: the loaded config `data` was dumped from: its file name and line map are
            kept, so later errors and refusals still name file:line.

    Raises:
        ConfigError: with file:line and the key for every problem.
    """
    where = str(path) if path else "<config>"
    lines: dict = {}
    if source is not None and path is None:
        where, lines = source._where, source._lines
    raw_text: str | None = None
    if path is not None:
        p = Path(path)
        raw_text = read_config_text(p)  # read once: a pipe (`<(cat cfg)`) has no second reading
        data, lines = _read_yaml(p, where, raw_text)
        if data is None:
            raise ConfigError(
                f"{where}: the config is empty; it needs `services` (the model endpoints) "
                "and `benchmarks` (what to run on them)"
            )
        if not isinstance(data, dict):
            raise ConfigError(f"{where}:1: the config must be a mapping with keys such as "
                              "services, benchmarks, output")
        data = compose(p, dict(data), _load_fragment)
        data = resolve_self_refs(data, data, where)
        strip_variables(data)
        resolve_playbooks(data, p.resolve().parent, _load_fragment, where)
    data = dict(data or {})
    if raw_text is not None:
        try:
            raw = yaml.safe_load(raw_text.replace("$${", "${"))
        except yaml.YAMLError:
            raw = None
        _keep_secret_references(data, raw)
    for expr in overrides or []:
        apply_override(data, expr)
    try:
        cfg = NelConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, where, lines)) from None
    cfg._where, cfg._lines = where, _remap_benchmark_lines(lines, cfg._benchmark_origin)
    if path is not None:
        _anchor_paths(cfg, Path(path).resolve().parent)
    return cfg



def _remap_benchmark_lines(lines: dict, origin: list[int] | None) -> dict:
    """The line map with merged per-model entries' keys renumbered (`benchmarks.N...` of the
    merged list), so a later refusal still names the line of the entry in the file."""
    if origin is None:
        return lines
    out = {k: v for k, v in lines.items() if not (len(k) > 1 and k[0] == "benchmarks")}
    for new, old in enumerate(origin):
        for k, v in lines.items():
            if len(k) > 1 and k[0] == "benchmarks" and k[1] == old:
                out[("benchmarks", new, *k[2:])] = v
    return out


def _anchor_paths(cfg: NelConfig, base: Path) -> None:
    """Input files named relative to the config file are found there (so the config still
    works when loaded from another directory, e.g. by `dagster dev`); paths that only exist
    relative to the current directory are left alone."""

    def anchored(value: str | None) -> str | None:
        if not value or "://" in value or Path(value).expanduser().is_absolute():
            return value
        candidate = base / value
        return str(candidate) if candidate.exists() and not Path(value).exists() else value

    cfg.data_dir = anchored(cfg.data_dir)
    cfg.comparison.policy = anchored(cfg.comparison.policy)
    cfg.checkpoints.dir = anchored(cfg.checkpoints.dir)
    for b in cfg.benchmarks:
        if b.module and (b.module.endswith(".py") or "/" in b.module):
            b.module = anchored(b.module)
    for svc in cfg.services.values():
        svc.model_path = anchored(svc.model_path)
