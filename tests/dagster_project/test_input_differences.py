"""The deliberate input-checking differences from NeMo Evaluator 0.3.0, run through both CLIs.

docs/explanation/differences.md lists them ("input checked before any work"): nel refuses
bad input as a usage error before any work, where the peer starts work that then fails or
stores what it cannot use. Each case runs the real peer too, so the row cannot go stale.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_nel
from tests.support.peers import run_peer_nemo

UNREACHABLE = "http://127.0.0.1:9/v1"


def _home(tmp_path: Path, who: str) -> dict[str, str]:
    home = tmp_path / who
    home.mkdir()
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def test_unknown_benchmark_is_a_usage_error_before_any_output(tmp_path: Path) -> None:
    args = ("eval", "run", "-b", "nosuchbench", "--model-url", UNREACHABLE, "--model-id", "m",
            "--max-problems", "2")
    peer = run_peer_nemo(*args, "-o", str(tmp_path / "peer"), env=_home(tmp_path, "p"))
    ours = run_nel(*args, "-o", str(tmp_path / "nel"), env=_home(tmp_path, "n"))
    assert peer.returncode == 1, peer.stderr[-2000:]
    assert (tmp_path / "peer").is_dir()  # the peer made a run that then failed
    assert ours.returncode == 2, ours.stderr[-2000:]
    assert not (tmp_path / "nel").exists()
    assert "unknown benchmark 'nosuchbench'" in ours.stderr
    assert "Traceback" not in ours.stderr


def test_config_set_of_an_unknown_key_is_refused(tmp_path: Path) -> None:
    peer = run_peer_nemo("config", "set", "nosuch.key", "3", env=_home(tmp_path, "p"))
    ours = run_nel("config", "set", "nosuch.key", "3", env=_home(tmp_path, "n"))
    assert peer.returncode == 0 and "nosuch.key" in peer.stdout
    assert ours.returncode == 2
    assert "unknown config key 'nosuch.key'" in ours.stderr and "data_dir" in ours.stderr


def test_validate_checks_data_without_a_model_endpoint(tmp_path: Path) -> None:
    env = {**_home(tmp_path, "n"), "NEL_DATA_DIR": str(tmp_path / "empty")}
    peer = run_peer_nemo("validate", "-b", "gsm8k", env=_home(tmp_path, "p"))
    ours = run_nel("validate", "-b", "gsm8k", env=env, unset=("NEL_MODEL_URL",))
    assert peer.returncode == 2 and "--model-url" in peer.stderr
    # nel gets as far as the data: its one line says where to put the missing file
    assert ours.returncode == 2
    assert "gsm8k: data file 'test.jsonl' not found" in ours.stderr
    assert "Traceback" not in ours.stderr
