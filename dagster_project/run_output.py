"""Where a run writes: the output directory, its Dagster home and the effective config
saved there, each refused in one line (exit 2, nothing ran) when it cannot be used."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.errors import NelError
from dagster_project import run_log
from dagster_project.instance_config import write_instance_yaml
from dagster_project.output_lock import OutputLock
from nel_resources.config import NelConfig


def save_effective_config(cfg: NelConfig, out: Path) -> Path:
    """Write the run's config (absolute output dir, no secret values) next to the results,
    so `NEL_CONFIG=<out>/nel-config.yaml dagster dev ...` shows the same asset graph.

    Secrets given by reference (`api_key_env`, `api_key: ${VAR}`, headers written with
    `${VAR}`) keep the reference, so runs started from that file authenticate; secrets
    written literally are left out (api_key) or replaced by a marker (auth-like headers),
    with a warning saying to use `${VAR}`.
    """
    import sys

    import yaml

    from nel_resources.wire.endpoint_url import redact_url
    from nel_resources.wire.redact import REDACTED, is_secret_header

    data = cfg.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("output", {})["dir"] = str(out)
    # The seed that picked the items is written out even when it is the default: the file
    # must select the same items wherever NEL_SHUFFLE_SEED says otherwise.
    for entry, bench in zip(data.get("benchmarks", []), cfg.benchmarks, strict=True):
        entry["shuffle_seed"] = bench.shuffle_seed
    for name, svc in data.get("services", {}).items():
        if svc.pop("api_key", None):
            print(f"warning: services.{name}.api_key is written literally, so "
                  f"{out / 'nel-config.yaml'} leaves it out: write api_key: ${{VAR}} (or "
                  "api_key_env) so runs started from that file authenticate", file=sys.stderr)
        if svc.get("url") and (url := redact_url(svc["url"])) != svc["url"]:
            svc["url"] = url
            print(f"warning: services.{name}.url carries credentials (user-info or a query "
                  f"string), redacted in nel-config.yaml: runs started from that file need "
                  f"-O services.{name}.url=...", file=sys.stderr)
        for key, value in (svc.get("headers") or {}).items():
            if "${" not in value and is_secret_header(key):
                svc["headers"][key] = REDACTED
                print(f"warning: services.{name}.headers.{key} is written literally and is "
                      f"replaced by {REDACTED} in nel-config.yaml: write it as ${{VAR}}",
                      file=sys.stderr)
    path = out / "nel-config.yaml"
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text("# The effective config of the last `nel eval run` here (secret values "
                   "removed; environment-variable references kept).\n" + yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)
    return path


def dagster_home_for(cfg: NelConfig) -> Path:
    """The Dagster home a run uses (created with a dagster.yaml if new)."""
    return dagster_home_at(cfg.output.dir, cfg.output.dagster_home)


def dagster_home_at(output_dir: str, dagster_home: str | None) -> Path:
    """The Dagster home of a run writing to `output_dir` (`output.dagster_home`, or
    `<output_dir>/.dagster`), created with a dagster.yaml if new."""
    home = dagster_home or os.path.join(output_dir, ".dagster")
    path = Path(home).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    write_instance_yaml(path)  # SQLite here, or the shared Postgres instance when selected
    return path


class HomeUnusable(NelError):
    """The Dagster instance cannot be opened at `home` (one line; exit 2 when nothing ran)."""

    def __init__(self, home: Path, reason: str) -> None:
        super().__init__(f"cannot use the Dagster home {home}: {reason}")
        self.reason = reason


def os_reason(exc: OSError) -> str:
    """`strerror` and a hint for the errors a user can fix where nel writes."""
    import errno

    text = exc.strerror or str(exc)
    hints = {errno.ENOSPC: "free some space or write elsewhere",
             errno.EROFS: "the file system is mounted read-only; write elsewhere",
             errno.EACCES: "no permission to write there; write elsewhere",
             errno.EDQUOT: "the disk quota is exceeded; free some space or write elsewhere"}
    hint = hints.get(exc.errno or 0)
    return f"{text} ({hint})" if hint else text


def storage_reason(exc: BaseException) -> str:
    """One line for an exception from the Dagster instance's storage."""
    if isinstance(exc, OSError):
        return os_reason(exc)
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "disk is full" in line or "No space left" in line:
        line += " (free some space or set output.dagster_home to another disk)"
    elif "disk I/O error" in line or "readonly database" in line:
        # SQLite reports a write that hit a full or read-only disk this way.
        line += " (is the Dagster home's disk full or read-only? free space or set output.dagster_home)"
    return f"{type(exc).__name__}: {line}"


def prepare_output(cfg: NelConfig, lock: OutputLock | None = None) -> tuple[Path, Path]:
    """Create the output directory and the Dagster home; NelError (one line, exit 2) when
    either cannot be used (a file in the way, a read-only or full disk). Nothing has run yet.
    `lock` is taken on the directory before anything is written into it."""
    out = Path(cfg.output.dir).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise NelError(f"the output directory {out} is a file: give -o / output.dir a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NelError(f"cannot create the output directory {out}: {os_reason(exc)}") from None
    if lock is not None:
        lock.acquire(out)
    home = Path(cfg.output.dagster_home or out / ".dagster").expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise NelError(f"the Dagster home {home} is a file: set output.dagster_home to a directory")
    try:
        home = dagster_home_for(cfg)
    except OSError as exc:
        raise NelError(f"cannot use the Dagster home {home}: {os_reason(exc)}") from None
    try:
        save_effective_config(cfg, out)
        run_log.append(run_log.log_path_for(out), f"nel eval run: output {out}, Dagster home {home}")
    except OSError as exc:
        raise NelError(f"cannot write to the output directory {out}: {os_reason(exc)}") from None
    return out, home
