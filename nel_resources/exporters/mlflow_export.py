"""The `mlflow` exporter: one MLflow run per bundle (benchmark x model), updated on re-export.

Each bundle's run holds the evaluation's params (model, benchmark, generation settings, nel
version, config fingerprint), every score with its CI bounds and standard error as metrics
(at the checkpoint's training step when the model's name has one, else step 0), and the
bundle, its results and nel's report as artifacts (`mlflow_content`), and with `emit_traces:
true` one trace per sample (`mlflow_traces`). Re-exporting the same
bundle finds its run by the `nel.bundle_key` tag and updates it: never a second run.

The runs go to `tracking_uri`, else MLFLOW_TRACKING_URI, else a SQLite store in
`<output>/mlflow/` (`mlflow ui --backend-store-uri sqlite:///<output>/mlflow/mlflow.db`).
Settings are NeMo Evaluator 0.3.0's (`mlflow_settings`).

An export that fails (mlflow not installed, a tracking server that does not answer) never
loses the evaluation: the run's files stay, one line says what failed and how to export
again (`nel export <dir> --dest mlflow`), and the exporter returns 1 instead of raising.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nel_resources.exporters.bundle_content import read_bundle, run_root
from nel_resources.exporters.mlflow_content import BUNDLE_KEY_TAG, RunContent, run_content
from nel_resources.exporters.mlflow_settings import (
    MlflowSettings,
    is_local_store,
    local_artifact_root,
    parse_settings,
    tracking_uri,
)
from nel_resources.wire.endpoint_url import redact_url

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["export", "log_run", "parse_settings"]

INSTALL_HINT = "pip install 'nel[mlflow]'"
# MLflow's own HTTP retries back off for minutes by default (7 tries, factor 2): a tracking
# server that is down would hold the end of an evaluation that long. These bound it to
# seconds; a user's own MLFLOW_HTTP_REQUEST_* settings win.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
_BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's log_batch limits


def export(bundles: list[Path], settings: dict[str, Any], output_dir: str | None = None) -> int:
    """Log one MLflow run per bundle; 0 when every bundle was exported, else 1.

    Args:
        bundles: `eval-*.json` files (each with its `results.jsonl` beside it).
        settings: the exporter's settings (`mlflow_settings.MlflowSettings`).
        output_dir: the run's output directory, whose `mlflow/` holds the default store
            (default: found from each bundle's path).

    Raises:
        NelError: bad settings or a bundle that cannot be read (one line). A failure to reach
            the tracking store is not raised: it is reported in one line and returns 1.
    """
    parsed = parse_settings(settings)
    docs = [(Path(p), read_bundle(Path(p))) for p in bundles]
    failed = 0
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        for root in dict.fromkeys(_root(p, output_dir) for p, _ in docs):
            _say_failed(f"the mlflow package is not installed ({INSTALL_HINT})", root, parsed)
        return 1
    _quiet_mlflow_logs()
    clients: dict[str, MlflowClient] = {}
    for path, doc in docs:
        root = _root(path, output_dir)
        uri = tracking_uri(parsed, root)
        content = run_content(doc, path, parsed)
        try:
            with _http_defaults(uri):
                client = clients.get(uri) or clients.setdefault(uri, MlflowClient(tracking_uri=uri))
                run_id, what = log_run(client, parsed, content, uri)
                if parsed.emit_traces and what != "skipped":
                    from nel_resources.exporters.mlflow_traces import log_traces, read_samples

                    traces = log_traces(client, uri, run_id, read_samples(path), benchmark=content.benchmark,
                                        model=content.model, content_max=parsed.emit_traces_content_max,
                                        max_samples=parsed.emit_traces_max_samples)
                    what += f", {traces} trace(s)" if traces else ", its traces kept"
        except Exception as exc:  # any tracker failure: the evaluation stays
            failed += 1
            _say_failed(f"{content.benchmark}/{content.model} to {_shown(uri)}: {_one_line(exc)}",
                        root, parsed)
            continue
        # stderr, not stdout: in a run stdout may be `--json`'s document (and stderr the log)
        print(f"mlflow: {content.benchmark}/{content.model} -> run {run_id} ({what}, step {content.step}) "
              f"in experiment {parsed.experiment_name!r} at {_shown(uri)}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def log_run(client: MlflowClient, settings: MlflowSettings, content: RunContent, uri: str) -> tuple[str, str]:
    """Create or update the run of `content`; returns (run id, "created"|"updated"|"skipped")."""
    from mlflow.entities import Metric, Param, RunTag

    exp_id = _experiment_id(client, settings.experiment_name, uri)
    found = client.search_runs([exp_id], filter_string=f"tags.`{BUNDLE_KEY_TAG}` = '{content.key}'",
                               max_results=1)
    if found and settings.skip_existing:
        return found[0].info.run_id, "skipped"
    run = found[0] if found else client.create_run(exp_id, run_name=content.run_name, tags=content.tags)
    run_id = run.info.run_id
    have_params, have_metrics = run.data.params, run.data.metrics
    now = int(time.time() * 1000)
    tags = {**content.tags, "mlflow.runName": content.run_name}
    if settings.description:
        tags["mlflow.note.content"] = settings.description
    # Params are write-once in MLflow; the run's key covers them, so a found run has them all.
    params = [Param(k, v) for k, v in content.params.items() if have_params.get(k) != v]
    # A re-export of unchanged scores adds no duplicate points to the metric history.
    metrics = [Metric(k, v, now, content.step) for k, v in content.metrics.items() if have_metrics.get(k) != v]
    _log_batches(client, run_id, metrics=metrics, params=params,
                 tags=[RunTag(k, v) for k, v in tags.items() if run.data.tags.get(k) != v])
    _log_artifacts(client, run_id, content.artifacts)
    client.set_terminated(run_id, "FINISHED")
    return run_id, "updated" if found else "created"


def _log_artifacts(client: MlflowClient, run_id: str, files: list[tuple[Path, str]]) -> None:
    """Each file at its path in the run (a file whose name changes goes through a temp copy:
    MLflow names an artifact after its file). Logging a path again replaces it."""
    with tempfile.TemporaryDirectory(prefix="nel-mlflow-") as tmp:
        for path, dest in files:
            folder, _, name = dest.rpartition("/")
            if name != path.name:
                path = Path(shutil.copyfile(path, Path(tmp) / name))
            client.log_artifact(run_id, str(path), artifact_path=folder or None)


def _experiment_id(client: MlflowClient, name: str, uri: str) -> str:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=local_artifact_root(uri))
        except MlflowException:  # another process created it meanwhile
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":  # a deleted experiment still holds its name
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _log_batches(client: MlflowClient, run_id: str, **items: list[Any]) -> None:
    while any(items.values()):
        chunk = {k: v[:_BATCH[k]] for k, v in items.items()}
        client.log_batch(run_id, **chunk)
        items = {k: v[_BATCH[k]:] for k, v in items.items()}


def _root(path: Path, output_dir: str | None) -> Path:
    return Path(output_dir) if output_dir else run_root(path)


def _say_failed(what: str, root: Path, settings: MlflowSettings) -> None:
    """The one line of a failed export: what failed, that the results stay, how to retry."""
    again = f"nel export {root} --dest mlflow"
    if settings.tracking_uri:
        again += f" -o tracking_uri={_shown(settings.tracking_uri)}"
    if settings.experiment_name != MlflowSettings.model_fields["experiment_name"].default:
        again += f" -o experiment_name={settings.experiment_name}"
    line = f"mlflow export failed: {what}; the results are kept in {root}; export them again with `{again}`"
    print(line, file=sys.stderr, flush=True)
    # During `nel eval run` stderr is the run's log file (dagster_project.run_log); the user
    # must see this line to act on it, so it also goes to the terminal's own stderr.
    if sys.stderr is not sys.__stderr__ and sys.__stderr__ is not None:
        print(line, file=sys.__stderr__, flush=True)


def _shown(uri: str) -> str:
    """A tracking URI fit to print: a server's credentials redacted, a local path as is."""
    return uri if is_local_store(uri) else redact_url(uri)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    # A server that does not answer: MLflow's text is 400 characters of urllib3 retry detail
    # around the one fact that matters ("[Errno 111] Connection refused").
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno and ("Max retries exceeded" in text or "ConnectionError" in text):
        return f"cannot reach the tracking server ({errno.group(1).strip()})"
    return f"{type(exc).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


@contextlib.contextmanager
def _http_defaults(uri: str) -> Iterator[None]:
    """Bounded HTTP retries while talking to a server (`_HTTP_DEFAULTS`), the user's own
    settings kept; a local file store also needs MLflow's opt-in (it is deprecated there)."""
    wanted = {} if is_local_store(uri) else dict(_HTTP_DEFAULTS)
    if uri.startswith("file:") or "://" not in uri:
        wanted["MLFLOW_ALLOW_FILE_STORE"] = "true"
    added = [k for k in wanted if k not in os.environ]
    os.environ.update({k: wanted[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _quiet_mlflow_logs() -> None:
    # The store's schema migrations log a dozen INFO lines on a new SQLite store.
    for name in ("mlflow.store.db.utils", "alembic.runtime.migration", "mlflow.store.sqlalchemy_store"):
        logging.getLogger(name).setLevel(logging.WARNING)
