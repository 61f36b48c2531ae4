"""The `container` solver: a legacy NeMo eval-factory harness image run as an opaque box.

`container://<image>#<task>` (with `solver.type: container`) hands the whole benchmark to the
image: nel writes the harness's run config (the task, the model endpoint, the benchmark's
`params`), mounts it at `/config/run_config.yaml` with an empty `/results`, runs
`nemo-evaluator run_eval` (or `eval-factory run_eval` on older images) in it with the Docker
engine, and reads back `results.yml`, `eval_factory_metrics.json` and any per-sample
`eval-results/**/output*.jsonl` (see `container_results`). The harness owns the model calls,
so nel has no per-turn trajectory for it; its scores go into nel's normal bundle.

The container shares the host's network namespace (`--network host`), so a model endpoint on
127.0.0.1 is reachable from inside exactly as from nel. Nothing is pulled: an image that is not
in the local engine is refused in one line before any request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.errors import NelError
from benchmarks.uri_schemes import parse_container as parse_name
from nel_assets.engine.solvers.container_results import HarnessResults, read_results, row_reward
from nel_resources.images.harness_image import docker_bin, missing_image_reason

__all__ = ["HarnessOutcome", "HarnessRun", "build_run_config", "missing_image_reason",
           "parse_name", "run_harness", "store_rows"]

RESULTS_MOUNT = "/results"
CONFIG_MOUNT = "/config/run_config.yaml"
#: The env var the run config's `api_key_name` points at (as eval-factory images expect).
API_KEY_ENV = "NEMO_API_KEY"
#: Either entry point, whichever the image has (newer images ship `nemo-evaluator`).
_ENTRY = ("cmd=$(command -v nemo-evaluator >/dev/null 2>&1 && echo nemo-evaluator "
          f"|| echo eval-factory) && exec $cmd run_eval --run_config {CONFIG_MOUNT}")
_ENDPOINT_PATH = {"chat": "/chat/completions", "completions": "/completions"}
#: How much of the harness's output a failure message quotes (its last lines explain it).
_TAIL_CHARS = 600
DEFAULT_TIMEOUT_S = 3600.0


def endpoint_url(base_url: str, endpoint_type: str) -> str:
    """The full endpoint URL eval-factory harnesses expect (`.../v1/chat/completions`)."""
    from nel_resources.wire.openai_fields import normalize_base_url

    return normalize_base_url(base_url) + _ENDPOINT_PATH.get(endpoint_type, "/chat/completions")


def build_run_config(task: str, *, url: str, model_id: str, endpoint_type: str,
                     params: dict[str, Any] | None = None,
                     adapter_config: dict[str, Any] | None = None,
                     with_api_key: bool = False) -> dict[str, Any]:
    """The legacy run config the harness's `run_eval --run_config` reads.

    `api_key_name` is written only when there is a key: harnesses look the named variable up
    and fail when it is unset, so a keyless local endpoint must not name one.
    """
    api: dict[str, Any] = {"url": url, "model_id": model_id, "type": endpoint_type}
    if with_api_key:
        api["api_key_name"] = API_KEY_ENV
    if adapter_config:
        api["adapter_config"] = adapter_config
    cfg: dict[str, Any] = {"type": task, "output_dir": RESULTS_MOUNT}
    if params:
        cfg["params"] = params
    return {"config": cfg, "target": {"api_endpoint": api}}


@dataclass
class HarnessRun:
    """One harness invocation: what to run and against which endpoint.

    Attributes:
        image: The local image.
        task: The harness task (`config.type`).
        base_url: The model endpoint as nel's client sees it (`http://127.0.0.1:P/v1`).
        model_id: The model name the harness sends.
        endpoint_type: `chat` or `completions`.
        params: The benchmark's `params` (passed through as `config.params`).
        adapter_config: Passed through verbatim (`target.api_endpoint.adapter_config`).
        api_key: The service's key (given to the container as `NEMO_API_KEY`, never written
            into the run config or any artifact).
        env_vars: Extra `-e` variables (`solver.env_vars`).
        mounts: Extra bind mounts host -> container (`solver.mounts`).
        timeout: Seconds the whole harness may take.
        name: The container's name (default `nel-harness-<random>`), which is how a harness
            past its timeout is found and removed.
    """

    image: str
    task: str
    base_url: str
    model_id: str
    endpoint_type: str = "chat"
    params: dict[str, Any] = field(default_factory=dict)
    adapter_config: dict[str, Any] | None = None
    api_key: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT_S
    name: str = field(default_factory=lambda: f"nel-harness-{uuid.uuid4().hex[:12]}")

    def run_config(self) -> dict[str, Any]:
        """The run config written for this invocation (no secret in it)."""
        return build_run_config(self.task, url=endpoint_url(self.base_url, self.endpoint_type),
                                model_id=self.model_id, endpoint_type=self.endpoint_type,
                                params=self.params, adapter_config=self.adapter_config,
                                with_api_key=bool(self.api_key))


@dataclass
class HarnessOutcome:
    """What a harness run produced: its results, or why there are none."""

    results: HarnessResults | None
    error: str | None
    exit_code: int | None
    run_config: dict[str, Any]
    elapsed_s: float
    log_tail: str = ""


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _TAIL_CHARS else "..." + text[-_TAIL_CHARS:]


async def run_harness(run: HarnessRun) -> HarnessOutcome:
    """Run the harness image once and parse what it wrote.

    Never raises for a harness failure: a non-zero exit, a timeout or an unreadable results
    directory comes back as `HarnessOutcome.error` (one line), so the benchmark fails with
    the reason while other benchmarks go on.
    """
    t0 = time.perf_counter()
    cfg = run.run_config()
    # Under the system temp dir: the engine runs on this host, so it can bind it; the
    # harness may write root-owned files there, hence the forgiving removal.
    tmp = Path(tempfile.mkdtemp(prefix="nel_harness_"))
    name = run.name
    try:
        results = tmp / "results"
        results.mkdir()
        results.chmod(0o777)  # a harness image may run as a non-root user
        cfg_path = tmp / "run_config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        args = [docker_bin(), "run", "--rm", "--name", name, "--network", "host",
                "-v", f"{results}:{RESULTS_MOUNT}", "-v", f"{cfg_path}:{CONFIG_MOUNT}:ro"]
        for host, inside in run.mounts.items():
            args += ["-v", f"{host}:{inside}"]
        env = dict(run.env_vars)
        if run.api_key:
            env[API_KEY_ENV] = run.api_key
        for k in env:
            # `-e NAME` takes the value from the docker CLI's environment, so no secret
            # appears on a command line (`ps`) or in a log of the argv.
            args += ["-e", k]
        args += [run.image, "bash", "-c", _ENTRY]
        proc = await asyncio.create_subprocess_exec(
            *args, env={**os.environ, **env}, start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), run.timeout)
        except TimeoutError:
            # Killing the docker CLI leaves its container running: remove it by name, and
            # again once the CLI is gone, in case it was still being created the first time.
            await _remove(name)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            await _remove(name)
            return HarnessOutcome(None, f"the harness did not finish within {run.timeout:g} s "
                                  "(solver.run_timeout)", None, cfg, time.perf_counter() - t0)
        log = out.decode(errors="replace")
        code = proc.returncode
        if code != 0:
            last = next((ln.strip() for ln in reversed(log.splitlines()) if ln.strip()), "")
            return HarnessOutcome(None, f"the harness exited with status {code}"
                                  + (f": {last[:300]}" if last else ""), code, cfg,
                                  time.perf_counter() - t0, _tail(log))
        try:
            parsed = read_results(results)
        except NelError as exc:
            return HarnessOutcome(None, str(exc), code, cfg, time.perf_counter() - t0, _tail(log))
        return HarnessOutcome(parsed, None, code, cfg, time.perf_counter() - t0, _tail(log))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _remove(name: str) -> None:
    """Stop a harness container that outlived its timeout (killing the CLI leaves it)."""
    proc = await asyncio.create_subprocess_exec(
        docker_bin(), "rm", "-f", name, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 60)


def store_rows(res: HarnessResults, *, benchmark: str, model: str, model_id: str, run_id: str,
               shard: int = 0) -> list[dict[str, Any]]:
    """The harness's per-sample records as nel result rows (empty when it wrote none).

    A record's verdict (`reward`/`score`, or `correct`/`passed`/... as 0/1) becomes the
    reward; a record without one is kept with a null reward and the error saying so, so it
    never counts as a wrong answer.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    now = time.time()
    for i, rec in enumerate(res.rows):
        pid = rec.get("problem_idx", i)
        pid = pid if isinstance(pid, int) else i
        rep = rec.get("repeat")
        rep = rep if isinstance(rep, int) else seen.get(pid, 0)
        seen[pid] = seen.get(pid, 0) + 1
        reward = row_reward(rec)

        def text(*keys: str, rec: dict[str, Any] = rec) -> str | None:
            v = next((rec[k] for k in keys if rec.get(k) is not None), None)
            return v if v is None or isinstance(v, str) else json.dumps(v, default=str)

        rows.append({
            "run_id": run_id, "benchmark": benchmark, "model": model, "model_id": model_id,
            "shard": shard, "problem_idx": pid, "repeat": rep, "sample_id": f"{pid}:{rep}",
            "category": text("category", "subject"),
            "prompt": text("prompt", "problem", "question", "input"),
            "expected": text("expected_answer", "expected", "answer", "target"),
            "response": text("model_response", "response", "generation", "output"),
            "extracted": text("extracted_answer", "predicted_answer"),
            "reward": reward, "method": "harness",
            "details": json.dumps({"source": "harness"}),
            "metadata": json.dumps(rec, default=str),
            "error": None if reward is not None else "the harness wrote no verdict for this sample",
            "failure_category": None if reward is not None else "error",
            "timestamp": now,
        })
    return rows


def harness_summary(image: str, task: str, outcome: HarnessOutcome) -> dict[str, Any]:
    """What the shard record keeps of a harness run (the bundle reads it back)."""
    res = outcome.results
    out: dict[str, Any] = {"image": image, "task": task, "exit_code": outcome.exit_code,
                           "elapsed_s": round(outcome.elapsed_s, 3), "run_config": outcome.run_config}
    if res is not None:
        out.update({"scores": res.scores, "samples": res.samples, "repeats": res.repeats,
                    "response_stats": res.response_stats, "n_sample_rows": len(res.rows)})
    if outcome.error:
        out["error"] = outcome.error
    return out
