"""The checks that need an implementation (nel_resources.checks) run after the schema and read
as the schema's own errors did (that the config package imports no implementation is
tests/test_architecture.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nel_resources.checks import check_supported, load_checked_config
from nel_resources.config import ConfigError, load_config


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


SVC = "services:\n  m:\n    type: api\n    url: http://127.0.0.1:9/v1\n    model: m\n"


def test_interceptor_field_error_names_the_field_line(tmp_path: Path) -> None:
    p = _write(tmp_path, SVC + "    interceptors:\n      - name: caching\n"
                             "        config: {bogus_field: 1}\nbenchmarks: [{name: gsm8k}]\n")
    load_config(p)  # the schema alone does not import the proxy
    with pytest.raises(ConfigError) as exc:
        load_checked_config(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:8: services.m.interceptors.0.config.bogus_field: "), msg
    assert "\n" not in msg


def test_cluster_key_of_another_type_is_refused_with_a_hint(tmp_path: Path) -> None:
    p = _write(tmp_path, SVC + "benchmarks: [{name: gsm8k}]\ncluster:\n  type: local\n"
                             "  walltime: '01:00:00'\n")
    with pytest.raises(ConfigError) as exc:
        load_checked_config(p)
    assert str(exc.value).startswith(f"{p}:9: cluster.walltime: a cluster of type 'local' has "
                                     "no key 'walltime'; "), str(exc.value)


def test_unbuilt_interceptor_loads_and_is_refused_before_a_run(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from nel_resources.proxy import registry

    p = _write(tmp_path, SVC + "    interceptors:\n      - name: streaming\n"
                             "benchmarks: [{name: gsm8k}]\n")
    check_supported(load_checked_config(p))  # all of NeMo Evaluator 0.3.0's are built now
    # the proxy's table of interceptors nel lacks still refuses one by name, before a run
    monkeypatch.setattr(registry, "UNBUILT", {"streaming": "collecting streamed answers"})
    cfg = load_checked_config(p)
    with pytest.raises(ConfigError, match=r":7: key services\.m\.interceptors\.0\.name: the "
                                          r"'streaming' interceptor .* is not supported yet in nel"):
        check_supported(cfg)
