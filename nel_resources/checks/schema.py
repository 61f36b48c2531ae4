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
    # `cluster.<key>:` mappings under keys that are not schema fields: a cluster type's own
    # block (a new type needs no schema field), or a mistake.
    for key in sorted(cluster.extra_blocks(), key=lambda k: (cfg.line_of("cluster", k) or 0, k)):
        if key not in cluster_types():
            near = closest(key, [*ClusterConfig.model_fields, *cluster_types()])
            line = cfg.line_of("cluster", key) or "?"
            raise ConfigError(f"{cfg._where}:{line}: unknown key 'cluster.{key}'"
                              + (f"; did you mean {near!r}?" if near else ""))
        if key not in ok:
            valid = {k for k in ok if k != "type"}
            near = closest(key, valid)
            hint = f"did you mean {near!r}?" if near else f"valid keys: {', '.join(sorted(valid))}"
            raise _error(cfg, ("cluster", key),
                         f"a cluster of type {cluster.type!r} has no key {key!r}; {hint}")
