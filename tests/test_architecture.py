"""ARCHITECTURE.md's rules, checked against the code (read with `ast`; nothing imported but
the registry tables): the layer order, no import circle across concepts, file sizes, the
config package importing no implementation, bench/ free of tests, and every registry the
page lists existing with entries that load."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchmarks.registries import Registry
from tests.support.import_graph import LAYERS, circles, concept, edges, layer, product_files

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
MAX_LINES = 600


def test_imports_only_go_down_the_layers() -> None:
    up = [f"{e.src}:{e.line} imports {e.dst}" for e in edges(ROOT) if layer(e.dst) < layer(e.src)]
    assert not up, "\n".join(up)
    # the page states the same order the check uses
    assert " → ".join(f"`{p}`" for p in LAYERS) in PAGE


def test_no_import_circle_spans_two_concepts() -> None:
    mods = product_files(ROOT)
    bad = [c for c in circles(ROOT, include_typing=True)
           if len({concept(m, mods) for m in c}) > 1]
    assert not bad, bad


def test_no_product_file_is_over_the_limit() -> None:
    big = {m: n for m, p in product_files(ROOT).items()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, big
    assert f"{MAX_LINES} lines" in PAGE


def test_the_config_package_imports_no_implementation() -> None:
    allowed = ("nel_resources.config", "benchmarks.errors", "benchmarks.registries",
               *re.findall(r"config may import\s+`([\w.]+)`", PAGE))
    bad = sorted({f"{e.src} -> {e.dst}" for e in edges(ROOT)
                  if e.src.startswith("nel_resources.config")
                  and not e.dst.startswith(allowed)})
    assert not bad, bad


def _config_imports(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every name `path` imports from the config package."""
    return [(node.lineno, a.name) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nel_resources.config")
            for a in node.names]


def test_the_assets_and_the_engine_take_specs_not_the_config() -> None:
    # The config blocks the specs carry: names specs.py imports from the config package that
    # appear in the annotations of its dataclasses' fields.
    specs = ROOT / "nel_resources" / "specs.py"
    tree = ast.parse(specs.read_text(encoding="utf-8"))
    annotated = {n.id for cls in tree.body if isinstance(cls, ast.ClassDef)
                 for f in cls.body if isinstance(f, ast.AnnAssign)
                 for n in ast.walk(f.annotation) if isinstance(n, ast.Name)}
    annotated |= {m for cls in tree.body if isinstance(cls, ast.ClassDef)
                  for f in cls.body if isinstance(f, ast.AnnAssign)
                  and isinstance(f.annotation, ast.Constant) and isinstance(f.annotation.value, str)
                  for m in re.findall(r"\w+", f.annotation.value)}
    blocks = {name for _, name in _config_imports(specs)} & annotated
    assert "ServiceConfig" in blocks and "NelConfig" not in blocks
    bad = [f"{path.relative_to(ROOT)}:{line} imports {name}"
           for path in sorted((ROOT / "nel_assets").rglob("*.py"))
           for line, name in _config_imports(path) if name not in blocks]
    assert not bad, bad
    # and the resolved config does not carry the config it came from
    fields = next(cls for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "ResolvedConfig")
    names = {f.target.id for f in fields.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}
    assert "benchmarks" in names and not any("NelConfig" in ast.unparse(f.annotation)
                                             for f in fields.body if isinstance(f, ast.AnnAssign))


def test_bench_imports_nothing_from_tests() -> None:
    bad = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert not bad, bad


#: "| kind | `module:NAME` |" rows of the page's registry table
REGISTRY_ROWS = re.findall(r"^\| ([^|]+?) \| `([\w.]+):(\w+)` \|", PAGE, re.M)


def test_the_page_lists_the_registries() -> None:
    assert len(REGISTRY_ROWS) >= 8, REGISTRY_ROWS


@pytest.mark.parametrize(("kind", "module", "attr"), REGISTRY_ROWS,
                         ids=[r[0] for r in REGISTRY_ROWS])
def test_every_registry_entry_loads(kind: str, module: str, attr: str) -> None:
    import importlib

    reg = getattr(importlib.import_module(module), attr)
    assert isinstance(reg, Registry), (kind, type(reg))
    assert len(reg) > 0, kind
    for name in reg.names():
        target = reg.target(name)
        mod = target.split(":", 1)[0]
        if mod.split(".")[0] not in LAYERS:
            continue  # registered at run time by user code (a BYOB file, a test's plugin)
        # an entry never names a module above its table's layer: loading it would be an
        # import against the layer order
        assert layer(mod) >= layer(module), (kind, name, target)
        assert reg.load(name) is not None, (kind, name)


def test_every_import_names_something_that_exists() -> None:
    """A function-level import runs only when its function does: after a module moves or
    stops re-exporting a name, such an import fails at run time, far from the change. Every
    `from <nel module> import <name>` of the product and bench/ must resolve now."""
    import importlib

    bad = []
    files = [p for pkg in (*LAYERS, "bench") for p in sorted((ROOT / pkg).rglob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] in LAYERS):
                continue
            mod = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name != "*" and not hasattr(mod, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: "
                                   f"{node.module} has no {alias.name}")
    assert not bad, "\n".join(bad)
