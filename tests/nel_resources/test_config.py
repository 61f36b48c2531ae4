"""Config loading: schema, env expansion, overrides, and errors naming file:line:key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.config import ConfigError, apply_override, load_config
from nel_resources.specs import service_fingerprint

WALKTHROUGH = """\
services:
  nemotron:
    type: api
    url: ${MODEL_URL:-http://127.0.0.1:8000/v1}
    model: nvidia/nemotron
    api_key_env: NEL_TEST_KEY
    protocol: chat_completions
    generation:
      temperature: 0.6
      top_p: 0.95
      max_tokens: 4096
      seed: 1
      stop: "</s>"
    max_concurrent: 32
  judge:
    type: api
    url: http://127.0.0.1:9000/v1
    model: judge-model
    role: judge
sandboxes:
  python:
    type: docker
    image: python:3.11
benchmarks:
  - name: gsm8k
    repeats: 4
    max_problems: 50
  - name: mmlu
    num_fewshot: 5
    system_prompt: "You are a careful expert."
cluster:
  type: slurm
  shards: 4
  slurm:
    partition: batch
output:
  dir: ./out
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def test_walkthrough_config_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODEL_URL", raising=False)
    cfg = load_config(write(tmp_path, WALKTHROUGH))
    svc = cfg.services["nemotron"]
    assert svc.url == "http://127.0.0.1:8000/v1"
    assert svc.generation.stop == ["</s>"]
    assert svc.generation.to_request() == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 4096,
                                           "seed": 1, "stop": ["</s>"]}
    assert cfg.benchmarks[0].repeats == 4
    # the judge is not a solver: benchmarks without `service` run against role=model only
    assert cfg.benchmarks[0].service_names(cfg.services) == ["nemotron"]
    assert cfg.cluster.shards == 4
    assert cfg.sandboxes["python"].image == "python:3.11"


def test_env_expansion_and_missing_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_URL", "http://127.0.0.1:1234/v1")
    cfg = load_config(write(tmp_path, WALKTHROUGH))
    assert cfg.services["nemotron"].url == "http://127.0.0.1:1234/v1"
    p = write(tmp_path, "services:\n  m:\n    url: ${NEL_SURELY_UNSET_VAR}\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml:3: environment variable NEL_SURELY_UNSET_VAR"):
        load_config(p)


def test_missing_api_key_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEL_TEST_KEY", raising=False)
    cfg = load_config(write(tmp_path, WALKTHROUGH))
    with pytest.raises(ConfigError, match="NEL_TEST_KEY"):
        cfg.services["nemotron"].resolved_api_key()
    monkeypatch.setenv("NEL_TEST_KEY", "sk-123")
    assert cfg.services["nemotron"].resolved_api_key() == "sk-123"


def test_unknown_key_and_wrong_type_name_file_line_key(tmp_path: Path) -> None:
    text = WALKTHROUGH.replace("    repeats: 4\n", "    repeats: four\n").replace(
        "    max_concurrent: 32\n", "    max_concurent: 32\n")
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert f"{p}:14: unknown key 'services.nemotron.max_concurent'" in msg
    assert f"{p}:26: benchmarks.0.repeats" in msg and "four" in msg


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    p = write(tmp_path, "services:\n  m:\n    url: [unclosed\nbenchmarks: []\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml:\d+: invalid YAML"):
        load_config(p)


def test_unknown_service_reference(tmp_path: Path) -> None:
    p = write(tmp_path, "services:\n  a:\n    url: http://x/v1\nbenchmarks:\n  - name: gsm8k\n    service: b\n")
    with pytest.raises(ConfigError, match="uses service 'b'"):
        load_config(p)


def test_overrides_including_list_items(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, WALKTHROUGH), overrides=[
        "benchmarks.0.repeats=8", "benchmarks[1].num_fewshot=0",
        "services.nemotron.generation.temperature=0", "output.dir=/tmp/x",
        "services.nemotron.generation.stop=[a, b]",
    ])
    assert cfg.benchmarks[0].repeats == 8
    assert cfg.benchmarks[1].num_fewshot == 0
    assert cfg.services["nemotron"].generation.temperature == 0
    assert cfg.services["nemotron"].generation.stop == ["a", "b"]
    assert cfg.output.dir == "/tmp/x"


def test_override_errors() -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_override({}, "novalue")
    with pytest.raises(ConfigError, match="out of range"):
        apply_override({"benchmarks": []}, "benchmarks.3.repeats=2")


def test_flat_generation_keys_and_fingerprint() -> None:
    cfg = load_config(data={"services": {"m": {"url": "http://x/v1", "temperature": 0.2}}})
    svc = cfg.services["m"]
    assert svc.generation.temperature == 0.2
    other = svc.model_copy(update={"url": "http://y/v1", "api_key": "secret"})
    assert service_fingerprint(other) == service_fingerprint(svc)  # URL/key don't matter
    hotter = svc.model_copy(update={"generation": svc.generation.model_copy(update={"temperature": 1.0})})
    assert service_fingerprint(hotter) != service_fingerprint(svc)


def test_fingerprint_json_redacts_keys() -> None:
    cfg = load_config(data={"services": {"m": {"url": "http://x/v1", "api_key": "sk-secret"}}})
    assert "sk-secret" not in cfg.fingerprint_json()


def test_input_paths_are_found_next_to_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "bench.py").write_text("# a BYOB module\n")
    (proj / "policy.yaml").write_text("version: 1\n")
    (proj / "model.gguf").write_bytes(b"GGUF")
    cfg_path = proj / "nel.yaml"
    cfg_path.write_text(
        "services:\n  m:\n    type: llama_cpp\n    model_path: model.gguf\n"
        "benchmarks:\n  - name: mine\n    module: bench.py\n"
        "comparison:\n  baseline: m\n  policy: policy.yaml\n")
    monkeypatch.chdir(tmp_path)  # elsewhere: the relative names only exist next to the config
    cfg = load_config(cfg_path)
    assert cfg.benchmarks[0].module == str(proj / "bench.py")
    assert cfg.comparison.policy == str(proj / "policy.yaml")
    assert cfg.services["m"].model_path == str(proj / "model.gguf")
    monkeypatch.chdir(proj)  # from the config's own folder nothing needs rewriting
    assert load_config(cfg_path).benchmarks[0].module == "bench.py"
