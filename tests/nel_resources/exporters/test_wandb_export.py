"""The `wandb` exporter against the real wandb package, offline: a real `nel eval run`
(reference server) writes one offline W&B run per bundle under the output directory, read
back from its `run-<id>.wandb` file (config, history at the checkpoint's step, summary,
files); re-export resumes the same run id and leaves one run; nothing reaches W&B's server
(its base URL is a loopback listener that must see no connection, and the Python side runs
behind the test network guard); a failed export loses nothing and says how to export again;
wandb missing says what to install; NeMo Evaluator 0.3.0's settings keys work."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from tests.support.cli import run_nel
from tests.support.gsm8k import answers_for
from tests.support.realcomponents import REPO_ROOT
from tests.support.wandb_runs import OfflineRun, read_run

N = 6
RIGHT = {0, 2, 3}
MODEL = "ckpt-step-3000"  # the model partition: a checkpoint saved at step 3000
NETGUARD = REPO_ROOT / "tests" / "support" / "netguard"
_WANDB_ENV = ["WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_API_KEY", "WANDB_RUN_ID",
              "WANDB_RESUME", "WANDB_BASE_URL"]


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.seen += 1
            conn.close()


@pytest.fixture
def w_and_b_server() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.sock.close()


@pytest.fixture
def gsm8k_config(tmp_path: Path, reference_server, data_dir: Path,
                 w_and_b_server: Listener) -> tuple[Path, dict[str, str]]:
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:N]
    url = reference_server(answers=answers_for(rows, RIGHT))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  {MODEL}:\n    type: api\n    url: {url}\n    model: ref-model\n"
                   f"    generation:\n      temperature: 0.0\n      max_tokens: 64\n"
                   f"benchmarks:\n  - name: gsm8k\n    max_problems: {N}\n    shuffle_seed: null\n"
                   f"output:\n  dir: {tmp_path / 'out'}\n  export: [wandb]\n")
    # W&B's server is a loopback listener: an offline export must never connect to it. The
    # Python side also runs behind the network guard (any non-loopback connection is logged).
    env = {"NEL_DATA_DIR": str(data_dir), "WANDB_BASE_URL": f"http://127.0.0.1:{w_and_b_server.port}",
           "PYTHONPATH": f"{NETGUARD}:{REPO_ROOT}", "NEL_NETGUARD_LOG": str(tmp_path / "net.log")}
    return cfg, env


def _bundle(out: Path) -> dict:
    (path,) = out.rglob("eval-*.json")
    return json.loads(path.read_text())


def _runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("wandb/offline-run-*"))


def _check_run(folder: Path, bundle: dict) -> tuple[str, OfflineRun]:
    """`folder/wandb/` holds exactly one offline run, with what it should; its id and content."""
    runs = _runs(folder)
    assert len(runs) == 1, runs
    (file,) = runs[0].glob("run-*.wandb")
    run = read_run(file)
    assert f"-{run.run_id}" in runs[0].name and run.run_id.startswith("nel-")
    assert run.project == "nel" and run.name == f"gsm8k/{MODEL}" and run.exit_code == 0
    c = run.config
    assert c["model"] == "ref-model" and c["benchmark"] == "gsm8k" and c["nel.model"] == MODEL
    assert c["temperature"] == "0.0" and c["max_tokens"] == "64" and c["repeats"] == "1"
    assert c["config_hash"] == bundle["config_hash"] and c["nel_version"] == bundle["generator"]["version"]
    assert c["nel.step"] == 3000
    score = bundle["bundle"]["score"]
    (row,) = [h for h in run.history if "score" in h]  # logged once, at the checkpoint's step
    assert row["_step"] == 3000
    assert row["score"] == pytest.approx(len(RIGHT) / N) == pytest.approx(score["mean"])
    assert row["score_ci_low"] == pytest.approx(score["ci_low"]) and row["score_ci_high"] == pytest.approx(score["ci_high"])
    assert row["score_ci_low"] < row["score"] < row["score_ci_high"]
    assert row["score_stderr"] == pytest.approx(score["se"]) and row["score_stderr"] > 0
    assert row["pass_at_1"] == pytest.approx(len(RIGHT) / N) and "pass_at_1_ci_high" in row
    assert row["n_items"] == N
    s = run.summary
    assert s["score"] == row["score"] and s["score_ci_high"] == row["score_ci_high"] and s["_step"] == 3000
    assert {"eval.json", "results.jsonl", "report/report.md"} <= set(run.files), run.files
    files = runs[0] / "files"
    assert json.loads((files / "eval.json").read_text()) == bundle
    assert len((files / "results.jsonl").read_text().splitlines()) == N
    return run.run_id, run


def test_offline_run_then_re_export_keeps_one_run(gsm8k_config, tmp_path: Path, w_and_b_server: Listener,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, env = gsm8k_config
    out = tmp_path / "out"
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0, p.stderr
    assert "wandb export failed" not in p.stderr
    bundle = _bundle(out)
    run_id, _ = _check_run(out, bundle)

    # the same bundle again, from `nel export`: the same run id, still one run
    p = run_nel("export", str(out), "--dest", "wandb", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0, p.stderr
    assert f"wandb: gsm8k/{MODEL} -> run {run_id} (offline, step 3000) in project 'nel' at {out / 'wandb'}" in p.stderr
    assert _check_run(out, bundle)[0] == run_id

    # the run again (nothing to evaluate, the bundle rebuilt): still that one run
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0, p.stderr
    assert _check_run(out, _bundle(out))[0] == run_id
    # quick re-exports in one process (several within one second: wandb then names the run's
    # folder `...-<id>-1`): still one run
    from nel_resources.exporters.wandb_export import export

    for name in _WANDB_ENV:
        monkeypatch.delenv(name, raising=False)
    (path,) = out.rglob("eval-*.json")
    for _ in range(5):
        assert export([path], {}, str(out)) == 0
    assert _check_run(out, _bundle(out))[0] == run_id
    # nothing left the machine: no connection to W&B's (loopback) server, no other one tried
    assert w_and_b_server.seen == 0
    net = tmp_path / "net.log"
    assert not net.exists() or not net.read_text(), net.read_text()


def test_nemo_evaluator_settings_and_own_dir(gsm8k_config, tmp_path: Path) -> None:
    """0.3.0's keys (project, entity, tags) and `dir`, from `output.export_config.wandb`."""
    cfg, env = gsm8k_config
    where = tmp_path / "runs"
    cfg.write_text(cfg.read_text() + "  export_config:\n    wandb:\n      project: ckpts\n      entity: my-team\n"
                   f"      tags: [nightly, gsm8k]\n      dir: {where}\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0 and "wandb export failed" not in p.stderr, p.stderr
    assert not (tmp_path / "out" / "wandb").exists()
    (run_dir,) = _runs(where)
    run = read_run(next(run_dir.glob("run-*.wandb")))
    assert (run.project, run.entity, run.tags) == ("ckpts", "my-team", ["nightly", "gsm8k"])
    assert [h["_step"] for h in run.history if "score" in h] == [3000]


def test_failed_export_keeps_the_results(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    out = tmp_path / "out"
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder\n")
    cfg.write_text(cfg.read_text() + f"  export_config:\n    wandb:\n      dir: {blocked}\n")
    p = run_nel("eval", "run", str(cfg), "--no-progress", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0, p.stderr  # the evaluation succeeded; only its export did not
    bundle = _bundle(out)
    assert bundle["bundle"]["score"]["n_items"] == N and next(out.rglob("results.jsonl")).is_file()
    failed = [ln for ln in p.stderr.splitlines() if "wandb" in ln]
    assert len(failed) == 1 and failed[0].startswith(f"wandb export failed: gsm8k/{MODEL}: "), p.stderr
    assert failed[0].endswith(f"; the results are kept in {out}; export them again with "
                              f"`nel export {out} --dest wandb -o dir={blocked}`"), failed[0]
    assert "Traceback" not in p.stderr

    # the retry, to a folder that can be written: the run is there
    p = run_nel("export", str(out), "--dest", "wandb", "-o", f"dir={tmp_path / 'ok'}", env=env, unset=_WANDB_ENV)
    assert p.returncode == 0, p.stderr
    assert len(_runs(tmp_path / "ok")) == 1

    # a WANDB_MODE that writes no run: the same one line, exit 1
    p = run_nel("export", str(out), "--dest", "wandb", env={**env, "WANDB_MODE": "disabled"})
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0, p.stderr
    assert p.stderr.startswith("wandb export failed: WANDB_MODE=disabled is not a mode the wandb exporter writes")


def test_without_wandb_installed_it_says_what_to_install(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    cfg.write_text(cfg.read_text().replace("  export: [wandb]\n", ""))
    assert run_nel("eval", "run", str(cfg), "--no-progress", env=env).returncode == 0
    blocker = tmp_path / "no_wandb" / "wandb"  # an interpreter where `import wandb` fails
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'wandb'\", name='wandb')\n")
    p = run_nel("export", str(tmp_path / "out"), "--dest", "wandb",
                env={**env, "PYTHONPATH": f"{blocker.parent}:{REPO_ROOT}"}, unset=_WANDB_ENV)
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip() == (
        "wandb export failed: the wandb package is not installed (pip install 'nel[wandb]'); "
        f"the results are kept in {tmp_path / 'out'}; export them again with "
        f"`nel export {tmp_path / 'out'} --dest wandb`")


def test_bad_settings_are_one_line(gsm8k_config, tmp_path: Path) -> None:
    cfg, env = gsm8k_config
    p = run_nel("eval", "run", str(cfg), "--no-progress", "-O", "output.export_config.wandb.projekt=x", env=env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "key output.export_config.wandb: wandb exporter: unknown setting 'projekt'" in p.stderr
    assert not (tmp_path / "out").exists()  # refused before any request
