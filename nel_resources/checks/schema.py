"""`check_schema`: the load-time checks that need an implementation's own table, run right
after the schema has validated a config (nel_resources.config imports no implementation).

- every interceptor's name and config fields, by the proxy's registry (its `FIELDS`);
- `cluster.type`, by the launcher table, and the `cluster:` keys that type takes, by its
  `Launcher.keys`.

Errors read as the schema's own: `file:line: <key path>: <message>`.
"""

from __future__ import annotations

from typing import Any

from nel_resources.config import ConfigError, NelConfig
from nel_resources.config._base import _as_plain, closest, field_defaults


def check_schema(cfg: NelConfig) -> None:
    """Refuse a bad interceptor or `cluster:` block, one line naming the key.

    Raises:
        ConfigError: `file:line: <key path>: <message>`.
    """
    _check_cluster(cfg)
    _check_exporters(cfg)
    for name, svc in cfg.services.items():
        chains = [(("interceptors",), svc.interceptors)]
        if svc.proxy is not None:
            chains.append((("proxy", "interceptors"), svc.proxy.interceptors))
        for where, chain in chains:
            for i, ic in enumerate(chain):
                _check_interceptor(cfg, ("services", name, *where, i), ic.name, ic.config)


def _error(cfg: NelConfig, path: tuple[Any, ...], message: str) -> ConfigError:
    key = ".".join(str(p) for p in path)
    return ConfigError(f"{cfg._where}:{cfg.line_of(*path) or '?'}: {key}: {message}")


def _check_interceptor(cfg: NelConfig, at: tuple[Any, ...], name: str,
                       config: dict[str, Any]) -> None:
    from nel_resources.proxy.fields import InterceptorConfigError
    from nel_resources.proxy.registry import validate

    try:
        validate(name, config, refuse_unbuilt=False)  # unbuilt ones: check_supported
    except InterceptorConfigError as exc:
        where = ("config", exc.field) if exc.field else ("name",)
        raise _error(cfg, (*at, *where), str(exc)) from None


def _check_cluster(cfg: NelConfig) -> None:
    """A known `cluster.type`, and only the keys that type takes (a key left at its default,
    as in a dumped config read back, passes)."""
    from nel_resources.config import ClusterConfig
    from nel_resources.launchers.registry import cluster_types, get_launcher, unknown_type_message

    cluster = cfg.cluster
    if cluster.type not in cluster_types():
        raise _error(cfg, ("cluster", "type"), unknown_type_message(cluster.type))
    ok = frozenset(get_launcher(cluster.type).keys)
    defaults = field_defaults(ClusterConfig)
    # In the order the file wrote them, so the first bad key is the one reported.
    for key in sorted(cluster.model_fields_set, key=lambda k: (cfg.line_of('cluster', k) or 0, k)):
        value = getattr(cluster, key)
        if key in defaults and _as_plain(value) == _as_plain(defaults[key]):
            continue
        if key != "type" and key not in ok:
            valid = {k for k in ok if k != "type"}
            near = closest(key, valid)
            hint = f"did you mean {near!r}?" if near else f"valid keys: {', '.join(sorted(valid))}"
            raise _error(cfg, ("cluster", key),
                         f"a cluster of type {cluster.type!r} has no key {key!r}; {hint}")
    # `cluster.<key>:` under keys that are not schema fields: a cluster type's own block (a
    # new type needs no schema field; its Launcher's refusal checks what is inside), or a
    # mistake, reported as the schema reports an unknown key.
    blocks = cluster.extra_blocks()
    for key in sorted(blocks, key=lambda k: (cfg.line_of("cluster", k) or 0, k)):
        if key not in cluster_types():
            near = closest(key, ClusterConfig.model_fields) or closest(key, cluster_types())
            line = cfg.line_of("cluster", key) or "?"
            raise ConfigError(f"{cfg._where}:{line}: unknown key 'cluster.{key}'"
                              + (f"; did you mean {near!r}?" if near else ""))
        if not isinstance(blocks[key], dict):
            raise _error(cfg, ("cluster", key),
                         f"write a mapping of settings (got {blocks[key]!r})")


def _check_exporters(cfg: NelConfig) -> None:
    """Every `output.export` / `output.export_config` name is an exporter nel knows (built
    or not yet: `check_supported` refuses the unbuilt ones before a run)."""
    from nel_resources.exporters import KNOWN_EXPORTERS

    known = ", ".join(KNOWN_EXPORTERS)
    for i, item in enumerate(cfg.output.export):
        name = item.get("type") if isinstance(item, dict) else item
        if name not in KNOWN_EXPORTERS:
            raise _error(cfg, ("output", "export", i),
                         f"unknown exporter {name!r}; the exporters are {known}")
    for name in cfg.output.export_config:
        if name not in KNOWN_EXPORTERS:
            raise _error(cfg, ("output", "export_config", name),
                         f"unknown exporter {name!r}; the exporters are {known}")
