"""A sample's `openclaw.json`: the user's own config (`config_path`) under nel's required
settings, and the web search plugin pointed at the sample's relay session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nel_assets.engine.solvers.openclaw_home import make_home, read_user_config
from nel_assets.engine.solvers.openclaw_tavily import PLUGIN_DIR

USER = {
    "models": {"mode": "replace", "providers": {"mine": {"baseUrl": "http://x/v1"}}},
    "agents": {"defaults": {"model": {"primary": "mine/m"}, "thinkingDefault": "low"}},
    "tools": {"fs": {"workspaceOnly": True}, "exec": {"timeoutSec": 99}},
    "plugins": {"load": {"paths": ["/opt/my-plugin"]}},
    "logging": {"level": "debug"},
}


def test_the_users_config_keeps_its_own_keys_under_nels(tmp_path: Path) -> None:
    (tmp_path / "user.json").write_text(json.dumps(USER))
    home = make_home(tmp_path, "s1", base_url="http://127.0.0.1:1/s/s1/v1", model="m",
                     search_url="http://127.0.0.1:2/s/s1",
                     user_config=read_user_config(tmp_path / "user.json"))
    cfg = json.loads((home.state / "openclaw.json").read_text())
    # nel's: the model through the capture proxy, the workspace, the search plugin
    assert cfg["models"]["mode"] == "merge"
    assert cfg["models"]["providers"]["nel"]["baseUrl"] == "http://127.0.0.1:1/s/s1/v1"
    assert cfg["agents"]["defaults"]["model"]["primary"] == "nel/m"
    assert cfg["agents"]["defaults"]["workspace"] == str(home.workspace)
    assert cfg["tools"]["fs"]["workspaceOnly"] is False
    assert cfg["tools"]["web"] == {"search": {"provider": "tavily"}}
    assert cfg["plugins"]["load"]["paths"] == ["/opt/my-plugin", str(PLUGIN_DIR)]
    assert cfg["plugins"]["entries"]["tavily"]["config"]["webSearch"]["baseUrl"] == \
        "http://127.0.0.1:2/s/s1"
    # the user's others stay
    assert cfg["models"]["providers"]["mine"] == {"baseUrl": "http://x/v1"}
    assert cfg["agents"]["defaults"]["thinkingDefault"] == "low"
    assert cfg["tools"]["exec"] == {"timeoutSec": 99} and cfg["logging"] == {"level": "debug"}


@pytest.mark.parametrize(("text", "says"), [("[1]", "expected a JSON object"),
                                            ("{nope", "not JSON")])
def test_a_bad_user_config_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "u.json").write_text(text)
    with pytest.raises(ValueError, match=says) as exc:
        read_user_config(tmp_path / "u.json")
    assert "\n" not in str(exc.value)
