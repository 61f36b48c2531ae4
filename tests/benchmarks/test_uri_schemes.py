"""What kind of benchmark a name is: one registry of URI schemes, asked by every layer."""

from __future__ import annotations

from benchmarks.uri_schemes import SCHEMES, is_uri, scheme_of


def test_schemes_are_registry_entries() -> None:
    assert SCHEMES.names() == ["container", "gym", "harbor", "lm-eval", "skills", "vlmevalkit"]
    assert scheme_of("vlmevalkit://MMBench_DEV_EN") == "vlmevalkit"
    assert scheme_of("gym://127.0.0.1:8000") == "gym"
    assert scheme_of("harbor://terminal-bench@2.0") == "harbor"
    assert scheme_of("container://img:1#task") == "container"
    assert scheme_of("skills://mmlu-pro") == "skills"
    assert scheme_of("lm-eval://mmlu") == "lm-eval"
    # plain names, files and schemes nel does not run are not URIs of a registered scheme
    for name in ("gsm8k", "bench.py:x", "gym:/x"):
        assert scheme_of(name) is None and not is_uri(name)
    assert is_uri("gym://h:1", "gym", "container") and not is_uri("gym://h:1", "container")


def test_a_new_scheme_is_one_entry() -> None:
    SCHEMES.add("demo", "benchmarks.remote:GymEnvironment")
    try:
        assert is_uri("demo://x", "demo") and scheme_of("demo://x") == "demo"
    finally:
        del SCHEMES["demo"]
    assert not is_uri("demo://x")
