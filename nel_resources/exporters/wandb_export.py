"""The `wandb` exporter: one W&B run per bundle (benchmark x model), offline by default.

Each bundle's run holds the content the mlflow exporter logs (`bundle_content`): the params as
the run config, every score with its CI bounds and standard error in the history at the
checkpoint's training step (step 0 when the model's name has none) and in the summary, and
the bundle, its results and nel's report as run files.

Offline is the default (unless the `mode` setting or WANDB_MODE says online): the run files go
to `<dir>/wandb/offline-run-*-<id>/` (dir: the setting, else the run's output directory),
nothing leaves the machine and no account is needed; `wandb sync <that folder>` uploads them
later. The run id is derived from the bundle's key, and the run is opened with
`resume="allow"`: re-exporting the same bundle writes the same run, never a second one
(offline, the new run files replace the old ones of that id).

An export that fails (wandb not installed, a folder that cannot be written, an online server
that does not answer) never loses the evaluation: the run's files stay, one line says what
failed and how to export again (`nel export <dir> --dest wandb`), and the exporter returns 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.errors import NelError
from nel_resources.exporters.bundle_content import (
    BundleContent,
    bundle_content,
    read_bundle,
    run_root,
)
from nel_resources.exporters.wandb_settings import (
    WandbSettings,
    parse_settings,
    run_dir,
    run_mode,
)

__all__ = ["export", "log_run", "parse_settings", "run_id"]

INSTALL_HINT = "pip install 'nel[wandb]'"
# Offline, wandb-core would still send its own crash reports; nothing leaves the machine.
# Code, git state, requirements and system metrics are not part of an evaluation's record.
_QUIET_ENV = {"WANDB_ERROR_REPORTING": "false"}
_RUN_SETTINGS: dict[str, Any] = {"silent": True, "console": "off", "disable_code": True, "disable_git": True,
                                 "x_save_requirements": False, "x_disable_stats": True,
                                 "x_disable_machine_info": True, "init_timeout": 60.0}


def run_id(content: BundleContent, settings: WandbSettings) -> str:
    """The W&B run id of a bundle: the same for the same evaluation (its content key) in the
    same project, so a re-export resumes that run."""
    where = json.dumps([content.key, settings.entity, settings.project])
    return "nel-" + hashlib.sha256(where.encode()).hexdigest()[:32]


def export(bundles: list[Path], settings: dict[str, Any], output_dir: str | None = None) -> int:
    """Write one W&B run per bundle; 0 when every bundle was exported, else 1.

    Args:
        bundles: `eval-*.json` files (each with its `results.jsonl` beside it).
        settings: the exporter's settings (`wandb_settings.WandbSettings`).
        output_dir: the run's output directory, whose `wandb/` holds the offline runs
            (default: found from each bundle's path).

    Raises:
        NelError: bad settings or a bundle that cannot be read (one line). A failure to write
            the run is not raised: it is reported in one line and returns 1.
    """
    parsed = parse_settings(settings)
    docs = [(Path(p), read_bundle(Path(p))) for p in bundles]
    roots = list(dict.fromkeys(_root(p, output_dir) for p, _ in docs))
    try:
        mode = run_mode(parsed)
    except NelError as exc:
        for root in roots:
            _say_failed(str(exc), root, parsed)
        return 1
    with _env_defaults(_QUIET_ENV if mode == "offline" else {}):
        try:
            import wandb
        except ImportError:
            for root in roots:
                _say_failed(f"the wandb package is not installed ({INSTALL_HINT})", root, parsed)
            return 1
        failed = 0
        try:
            for path, doc in docs:
                root = _root(path, output_dir)
                content = bundle_content(doc, path, parsed)
                try:
                    where = log_run(wandb, parsed, content, mode, run_dir(parsed, root))
                except Exception as exc:  # any tracker failure: the evaluation stays
                    failed += 1
                    _say_failed(f"{content.benchmark}/{content.model}: {_one_line(exc)}", root, parsed)
                    continue
                # stderr, not stdout: in a run stdout may be `--json`'s document
                print(f"wandb: {content.benchmark}/{content.model} -> run {run_id(content, parsed)} ({mode}, "
                      f"step {content.step}) in project {parsed.project!r} at {where}", file=sys.stderr, flush=True)
        finally:
            if wandb.run is None:  # stop wandb's service process unless a run of the caller's is open
                with contextlib.suppress(Exception):
                    wandb.teardown()
    return 1 if failed else 0


def log_run(wandb: Any, settings: WandbSettings, content: BundleContent, mode: str, folder: Path) -> str:
    """Write (or resume) the run of `content`; returns where it is (its folder, or its URL)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not os.access(folder, os.W_OK):  # wandb would fall back to a temp folder, silently
        raise NelError(f"cannot write the run files in {folder} (set the exporter's `dir`)")
    rid = run_id(content, settings)
    config = {**content.params, "nel.bundle_key": content.key, "nel.step": content.step,
              "nel.benchmark": content.benchmark, "nel.model_partition": content.model}
    if content.job_id:
        config["job_id"] = content.job_id
    run = wandb.init(project=settings.project, entity=settings.entity, id=rid, resume="allow", mode=mode,
                     dir=str(folder), name=settings.run_name or f"{content.benchmark}/{content.model}",
                     group=settings.group, job_type=settings.job_type, notes=settings.notes,
                     tags=settings.tags, config=config, reinit="create_new",
                     settings=wandb.Settings(**_RUN_SETTINGS))
    try:
        run.config.update(config, allow_val_change=True)  # a resumed online run: the bundle's values
        # The history row at the checkpoint's step (a tracker plots a checkpoint series as a curve);
        # the summary holds the same values for a run that already logged this step.
        run.log(content.metrics, step=content.step)
        run.summary.update(content.metrics)
        _save_files(run, content.artifacts)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    if mode == "offline":
        here = Path(run.dir).parent
        _drop_older_runs(here, rid)
        return f"{here} (upload: wandb sync {here})"
    return str(getattr(run, "url", "") or settings.project)


def _save_files(run: Any, files: list[tuple[Path, str]]) -> None:
    """Each file at its path in the run's files (a copy: the run outlives a moved bundle)."""
    base = Path(run.dir)
    for path, dest in files:
        target = base / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        run.save(str(target), base_path=str(base), policy="end")


def _drop_older_runs(current: Path, rid: str) -> None:
    """Offline, each resume writes a new `offline-run-<time>-<id>` folder (`-<id>-1` within the
    same second): keep only the newest of this id, so a re-export replaces the run's files
    instead of adding a second copy."""
    for old in current.parent.glob(f"offline-run-*-{rid}*"):
        if old != current and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def _root(path: Path, output_dir: str | None) -> Path:
    return Path(output_dir) if output_dir else run_root(path)


def _say_failed(what: str, root: Path, settings: WandbSettings) -> None:
    """The one line of a failed export: what failed, that the results stay, how to retry."""
    again = f"nel export {root} --dest wandb"
    for key in ("mode", "dir", "project", "entity"):
        value = getattr(settings, key)
        if value and not (key == "project" and value == WandbSettings.model_fields["project"].default):
            again += f" -o {key}={value}"
    line = f"wandb export failed: {what}; the results are kept in {root}; export them again with `{again}`"
    print(line, file=sys.stderr, flush=True)
    # During `nel eval run` stderr is the run's log file (dagster_project.run_log); the user
    # must see this line to act on it, so it also goes to the terminal's own stderr.
    if sys.stderr is not sys.__stderr__ and sys.__stderr__ is not None:
        print(line, file=sys.__stderr__, flush=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, NelError):
        return text
    return f"{type(exc).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


@contextlib.contextmanager
def _env_defaults(wanted: dict[str, str]) -> Iterator[None]:
    """`wanted` environment values while exporting, the user's own settings kept."""
    added = [k for k in wanted if k not in os.environ]
    os.environ.update({k: wanted[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)
