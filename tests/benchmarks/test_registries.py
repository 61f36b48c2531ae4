"""The one registry shape: lazy loading, aliases, suggestions, sibling attributes."""

from __future__ import annotations

import sys

import pytest

from benchmarks.errors import NelError
from benchmarks.registries import Registry, UnknownNameError


def test_a_name_loads_its_module_only_when_first_used() -> None:
    sys.modules.pop("colorsys", None)
    reg: Registry[object] = Registry("colour space", {"hls": "colorsys:rgb_to_hls"})
    assert "hls" in reg and "colorsys" not in sys.modules  # asking costs no import
    fn = reg.load("hls")
    assert "colorsys" in sys.modules and fn is sys.modules["colorsys"].rgb_to_hls
    assert reg.module_attr("hls", "hls_to_rgb") is sys.modules["colorsys"].hls_to_rgb
    assert reg.module_attr("hls", "no_such_thing", 7) == 7


def test_unknown_names_suggest_the_nearest_and_are_user_errors() -> None:
    reg: Registry[object] = Registry("cluster type", {"docker": "os:getcwd", "slurm": "os:getpid"},
                                     aliases={"kubernetes": "docker"})
    with pytest.raises(UnknownNameError) as e:
        reg.load("dokcer")
    assert isinstance(e.value, NelError) and isinstance(e.value, KeyError)
    assert str(e.value) == ("unknown cluster type 'dokcer'; did you mean 'docker'? "
                            "(known: docker, kubernetes, slurm)")
    hinted: Registry[object] = Registry("benchmark", {"gsm8k": "os:getcwd"},
                                        hint="run `nel list`")
    assert str(hinted.unknown("zzz")) == "unknown benchmark 'zzz' (run `nel list`)"


def test_aliases_case_folding_and_bad_entries() -> None:
    reg: Registry[object] = Registry("scorer", {"exact": "os:getcwd"}, aliases={"EM": "exact"},
                                     fold_case=True)
    assert reg.canonical("em") == "exact" and reg.canonical("EXACT") == "exact"
    assert reg.names() == ["exact"] and reg.names(aliases=True) == ["em", "exact"]
    assert list(reg) == ["exact"] and len(reg) == 1
    with pytest.raises(ValueError, match="module:attr"):
        reg.add("x", "no_colon")
    with pytest.raises(ValueError, match="names no registered"):
        reg.alias("y", "missing")
