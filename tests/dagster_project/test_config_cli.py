"""`nel config` through the real CLI, and its values reaching the commands run next."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_nel


def test_config_set_show_get_unset(tmp_path: Path) -> None:
    env = {"NEL_USER_CONFIG": str(tmp_path / "c.yaml")}
    p = run_nel("config", "set", "model_path", str(tmp_path / "m.gguf"), env=env)
    assert p.returncode == 0 and str(tmp_path / "c.yaml") in p.stdout, p.stderr
    p = run_nel("config", "get", "model_path", env=env)
    assert (p.returncode, p.stdout.strip()) == (0, str(tmp_path / "m.gguf"))
    assert run_nel("config", "get", "data_dir", env=env).returncode == 1  # unset
    show = run_nel("config", "show", env={**env, "NEL_MODEL_PATH": "/from/env.gguf"}).stdout
    assert f"model_path   {tmp_path / 'm.gguf'}   [NEL_MODEL_PATH=/from/env.gguf wins]" in show
    assert "data_dir     (unset)" in show
    assert run_nel("config", "unset", "model_path", env=env).returncode == 0
    assert run_nel("config", "get", "model_path", env=env).returncode == 1


def test_unknown_key_one_line_exit_2(tmp_path: Path) -> None:
    p = run_nel("config", "set", "datadir", "x", env={"NEL_USER_CONFIG": str(tmp_path / "c.yaml")})
    assert p.returncode == 2
    assert p.stderr.strip() == ("error: unknown config key 'datadir'; did you mean 'data_dir'? "
                                "known keys: data_dir, model_path, model_url, api_key_env, output_dir, "
                                "dagster_postgres_url, daemon")
    assert not (tmp_path / "c.yaml").exists()


def test_a_broken_config_file_is_one_line_and_repairable(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data_dir: [unclosed\n")
    p = run_nel("list", env={"NEL_USER_CONFIG": str(cfg)})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and str(cfg) in p.stderr and "not valid YAML" in p.stderr
    cfg.unlink()
    assert run_nel("config", "set", "data_dir", str(tmp_path), env={"NEL_USER_CONFIG": str(cfg)}).returncode == 0


def test_validate_finds_data_through_the_config(tmp_path: Path, data_dir: Path) -> None:
    # What the README shows after `make run`: no NEL_DATA_DIR in the shell, the location
    # recorded by `nel config set`, offline (a hub attempt would fail, not retry for 23 s).
    env = {"NEL_USER_CONFIG": str(tmp_path / "c.yaml"), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    missing = run_nel("validate", "-b", "gsm8k", "--samples", "3", env={**env, "NEL_DATA_DIR": str(tmp_path)})
    assert missing.returncode == 2 and "gsm8k" in missing.stderr  # proves the data is needed
    assert run_nel("config", "set", "data_dir", str(data_dir), env=env).returncode == 0
    p = run_nel("validate", "-b", "gsm8k", "--samples", "3", "--json", env=env, unset=["NEL_DATA_DIR"])
    assert p.returncode == 0, p.stdout + p.stderr
