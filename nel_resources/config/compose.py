"""Config composition as NeMo Evaluator 0.3.0 does it, on raw YAML data.

- `defaults:` lists fragments (`clusters/slurm_big` is wrapped as `cluster:`) and
  `{_base_: other.yaml}` bases, merged in order; `_self_` places the file's own keys;
- fragments are found in `conf/` next to the config, `~/.config/nemo-evaluator/conf/`,
  then the built-in fragments below;
- `null` deletes a key inherited from a base; `${.a.b}` refers to another value of the
  merged config; top-level keys starting with `_` are variables, removed afterwards;
- `playbook: <file>` on a benchmark merges that benchmark file under the entry's keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nel_resources.config._base import ConfigError

# Built-in fragments (NeMo Evaluator ships `clusters/local`).
_BUILTIN_FRAGMENTS: dict[str, dict[str, Any]] = {"clusters/local": {"type": "local"}}
_GROUP_KEYS = {"clusters": "cluster", "cluster": "cluster"}
_SELF_REF_RE = re.compile(r"\$\{\.([A-Za-z0-9_.]+)\}")
# Built-in playbooks (NeMo Evaluator's, by name): benchmark entries a config can extend.
PLAYBOOK_DIR = Path(__file__).resolve().parent / "playbooks"

Loader = Callable[[Path], dict[str, Any]]


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in `overlay` replaces the base value."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _prune_nulls(data: dict[str, Any]) -> None:
    for key in [k for k, v in data.items() if v is None]:
        del data[key]
    for value in data.values():
        if isinstance(value, dict):
            _prune_nulls(value)


def search_paths(config: Path) -> list[Path]:
    """Directories searched for `defaults:` fragments, in order."""
    paths = [config.parent / "conf", Path.home() / ".config" / "nemo-evaluator" / "conf"]
    return [p for p in paths if p.is_dir()]


def _find(name: str, dirs: list[Path], where: str) -> Path | None:
    for base in dirs:
        for ext in ("", ".yaml", ".yml"):
            candidate = base / f"{name}{ext}"
            if candidate.is_file():
                return candidate
    if name in _BUILTIN_FRAGMENTS:
        return None
    looked = ", ".join(str(d) for d in dirs) or "no conf/ directory next to the config"
    stem = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    raise ConfigError(f"{where}: defaults: fragment {name!r} not found (looked in {looked}); "
                      f"create conf/{stem} next to the config")


def _find_base(name: str, dirs: list[Path], where: str) -> Path:
    for base in dirs:
        for ext in ("", ".yaml", ".yml"):
            candidate = base / f"{name}{ext}"
            if candidate.is_file():
                return candidate
    looked = ", ".join(str(d) for d in dirs)
    raise ConfigError(f"{where}: _base_: base file {name!r} not found (looked in {looked}); "
                      "give the path of an existing config relative to this one")


def compose(path: Path, data: dict[str, Any], load: Loader, seen: frozenset[Path] = frozenset()
            ) -> dict[str, Any]:
    """Resolve the `defaults:` list of one loaded file (recursively for its bases)."""
    where = str(path)
    resolved = path.resolve()
    if resolved in seen:
        raise ConfigError(f"{where}: defaults: the config includes itself (circular `_base_`)")
    defaults = data.pop("defaults", None)
    top_base = data.pop("_base_", None)
    if defaults is None and top_base is None:
        return data
    if not isinstance(defaults, list | None):
        raise ConfigError(f"{where}: defaults: must be a list of fragment names or "
                          "`{_base_: file}` entries")
    # A top-level `_base_: file` (or a list of files) is a base too, merged under this
    # file's keys; left alone it would be dropped as a `_variable` and a missing file
    # would go unnoticed.
    bases = top_base if isinstance(top_base, list) else [] if top_base is None else [top_base]
    entries = [{"_base_": b} for b in bases] + list(defaults or [])
    self_at = entries.index("_self_") if "_self_" in entries else len(entries)
    if "_self_" in entries:
        entries.remove("_self_")
    dirs = search_paths(path)
    layers: list[dict[str, Any]] = []
    for entry in entries:
        if isinstance(entry, dict) and set(entry) == {"_base_"}:
            base = _find_base(str(entry["_base_"]), [path.parent, *dirs], where)
            layers.append(compose(base, load(base), load, seen | {resolved}))
        elif isinstance(entry, str):
            found = _find(entry, dirs, where)
            content = load(found) if found else dict(_BUILTIN_FRAGMENTS[entry])
            group = entry.split("/", 1)[0] if "/" in entry else None
            layers.append({_GROUP_KEYS.get(group, group): content} if group else content)
        else:
            raise ConfigError(f"{where}: defaults: entry {entry!r} is neither a fragment "
                              "name nor `{_base_: file}`")
    layers.insert(self_at, data)
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    _prune_nulls(merged)
    return merged


def _lookup(ref: str, root: dict[str, Any], at: str, where: str) -> Any:
    """The value at `${.ref}`; a path that leads nowhere is an error, not literal text."""
    val: Any = root
    for key in ref.split("."):
        if not isinstance(val, dict) or key not in val:
            raise ConfigError(f"{where}: {at}: `${{.{ref}}}` refers to {ref!r}, which is not "
                              "in the config; define that key or correct the reference")
        val = val[key]
    return val


def resolve_self_refs(data: Any, root: dict[str, Any], where: str = "config", at: str = ""
                      ) -> Any:
    """Replace `${.a.b}` with the value at that path of the merged config."""
    if isinstance(data, str):
        whole = _SELF_REF_RE.fullmatch(data)
        if whole:  # a whole-value reference keeps the referred value's type
            return _lookup(whole.group(1), root, at or "(top level)", where)

        def sub(m: re.Match[str]) -> str:
            val = _lookup(m.group(1), root, at or "(top level)", where)
            return val if isinstance(val, str) else str(val)

        return _SELF_REF_RE.sub(sub, data)
    if isinstance(data, dict):
        return {k: resolve_self_refs(v, root, where, f"{at}.{k}" if at else str(k))
                for k, v in data.items()}
    if isinstance(data, list):
        return [resolve_self_refs(v, root, where, f"{at}.{i}") for i, v in enumerate(data)]
    return data


def strip_variables(data: dict[str, Any]) -> None:
    """Drop top-level `_name:` keys (values only there to be referred to)."""
    for key in [k for k in data if isinstance(k, str) and k.startswith("_")]:
        del data[key]


def resolve_playbooks(data: dict[str, Any], base_dir: Path, load: Loader, where: str) -> None:
    """Merge `playbook: <file>` benchmark entries onto the playbook file's benchmark."""
    benches = data.get("benchmarks")
    if not isinstance(benches, list):
        return
    for i, entry in enumerate(benches):
        if not isinstance(entry, dict) or "playbook" not in entry:
            continue
        entry = dict(entry)
        ref = str(entry.pop("playbook"))
        candidates = [Path(ref).expanduser()]
        if not candidates[0].is_absolute():
            candidates = [PLAYBOOK_DIR / ref, base_dir / ref, Path.cwd() / ref]
        candidates += [c.with_name(c.name + ext) for c in list(candidates) for ext in (".yaml", ".yml")]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            known = ", ".join(sorted(p.stem for p in PLAYBOOK_DIR.glob("*.yaml")))
            raise ConfigError(f"{where}: benchmarks.{i}.playbook: no playbook {ref!r} (built in: "
                              f"{known}); give one of those or the path of a playbook YAML "
                              "file relative to the config")
        benches[i] = deep_merge(load(found), entry)
