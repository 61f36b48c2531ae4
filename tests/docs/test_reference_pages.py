"""The generated reference pages (config keys, CLI, exit codes) match what the code says now."""

from __future__ import annotations

import argparse
import importlib.util
from types import ModuleType

from tests.docs.doc_examples import REPO_ROOT


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO_ROOT / "docs" / "gen_reference.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_reference_pages_are_what_the_generator_writes() -> None:
    stale = [str(path.relative_to(REPO_ROOT)) for path, text in _generator().render_all().items()
             if not path.is_file() or path.read_text() != text]
    assert not stale, f"stale generated pages (run `make docs` or `python docs/gen_reference.py`): {stale}"


def test_cli_page_lists_every_command_and_flag() -> None:
    from dagster_project.cli.main import build_parser

    page = (REPO_ROOT / "docs/reference/cli.md").read_text()

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"\n## {path} {name}\n" in page, f"{path} {name}"
                    walk(sub, f"{path} {name}")
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and action.help != argparse.SUPPRESS:
                    assert f"`{flag}`" in page, (path, flag)

    walk(build_parser(), "nel")


def test_config_page_lists_every_key() -> None:
    from nel_resources.config import NelConfig

    page = (REPO_ROOT / "docs/reference/config.md").read_text()
    seen: set[type] = set()

    def walk(model: type) -> None:
        if model in seen:
            return
        seen.add(model)
        assert f"\n## {model.__name__}\n" in page, model.__name__
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in page, (model.__name__, name)
            for arg in _models_in(info.annotation):
                walk(arg)

    walk(NelConfig)
    assert len(seen) >= 10


def _models_in(annotation: object) -> list[type]:
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def test_exit_codes_page_has_every_status() -> None:
    from dagster_project import exit_codes

    page = (REPO_ROOT / "docs/reference/exit-codes.md").read_text()
    for code, text in exit_codes.TABLE:
        assert f"\n| {code} | {text} |" in page, code
