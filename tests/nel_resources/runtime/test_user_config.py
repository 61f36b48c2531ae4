"""The user config file behind `nel config`: keys, storage, and the environment winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.runtime.user_config import (
    KEYS,
    UserConfigError,
    apply_user_config,
    get_value,
    load_user_config,
    set_value,
    unset_value,
    user_config_path,
)


def test_path_order() -> None:
    assert user_config_path({"NEL_USER_CONFIG": "/x/c.yaml", "XDG_CONFIG_HOME": "/y"}) == Path("/x/c.yaml")
    assert user_config_path({"XDG_CONFIG_HOME": "/y"}) == Path("/y/nel/config.yaml")
    assert user_config_path({}) == Path.home() / ".config" / "nel" / "config.yaml"


def test_set_get_unset_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "deep" / "config.yaml"
    monkeypatch.chdir(tmp_path)
    assert set_value("data_dir", "data", cfg) == str(tmp_path / "data")  # stored absolute
    assert set_value("model_url", " http://127.0.0.1:8000/v1 ", cfg) == "http://127.0.0.1:8000/v1"
    assert get_value("data_dir", cfg) == str(tmp_path / "data")
    assert load_user_config(cfg) == {"data_dir": str(tmp_path / "data"), "model_url": "http://127.0.0.1:8000/v1"}
    assert unset_value("data_dir", cfg) is True and unset_value("data_dir", cfg) is False
    assert get_value("data_dir", cfg) is None
    assert [p.name for p in cfg.parent.iterdir()] == ["config.yaml"]  # no temp file left behind


def test_unknown_key_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(UserConfigError, match=r"unknown config key 'data_dri'; did you mean 'data_dir'\?"):
        set_value("data_dri", "x", tmp_path / "c.yaml")
    with pytest.raises(UserConfigError, match="known keys: " + ", ".join(KEYS)):
        get_value("colour", tmp_path / "c.yaml")
    with pytest.raises(UserConfigError, match="empty value"):
        set_value("data_dir", "  ", tmp_path / "c.yaml")
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("text, message", [
    ("- a\n- b\n", "expected `key: value` lines"),
    ("data_dir: [unclosed\n", "not valid YAML"),
    ("model: x\n", "unknown config key 'model'"),
])
def test_a_broken_file_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(UserConfigError, match=message) as exc:
        load_user_config(cfg)
    assert str(cfg) in str(exc.value) and "\n" not in str(exc.value)


def test_apply_fills_only_unset_variables(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    set_value("data_dir", str(tmp_path), cfg)
    set_value("output_dir", str(tmp_path / "out"), cfg)
    set_value("api_key_env", "MY_KEY", cfg)
    env = {"NEL_USER_CONFIG": str(cfg), "NEL_OUTPUT_DIR": "/elsewhere", "NEL_API_KEY_ENV": ""}
    applied = apply_user_config(env)
    assert applied == {"NEL_DATA_DIR": str(tmp_path)}
    assert env["NEL_OUTPUT_DIR"] == "/elsewhere" and env["NEL_API_KEY_ENV"] == ""  # set (even empty) wins


def test_help_lists_every_key() -> None:
    from dagster_project.cli.commands_config import KEY_NAMES

    assert ", ".join(KEYS) == KEY_NAMES


def test_a_key_with_fixed_values_refuses_others(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    assert set_value("daemon", "AUTO", path) == "auto"
    with pytest.raises(UserConfigError, match=r"^NEL_DAEMON takes on, auto, off, not 'maybe'$"):
        set_value("daemon", "maybe", path)
    assert get_value("daemon", path) == "auto"
