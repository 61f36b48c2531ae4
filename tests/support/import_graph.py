"""nel's own import graph, read from the source with `ast` (nothing is imported).

Every `import`/`from ... import` counts: at module level, inside functions (a lazy import is
still a dependency) and under `if TYPE_CHECKING:` (marked, since it does not run). Used by the
architecture test to check the rules ARCHITECTURE.md states.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: the product's top-level packages, highest layer first: imports go only downward.
LAYERS = ("dagster_project", "nel_assets", "nel_resources", "benchmarks")


@dataclass(frozen=True)
class Edge:
    """`src` imports `dst` at `line` (`lazy`: inside a function; `typing`: TYPE_CHECKING only)."""

    src: str
    dst: str
    line: int
    lazy: bool
    typing: bool


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file of the product's packages."""
    out: dict[str, Path] = {}
    for pkg in LAYERS:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(root, path)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(modules: dict[str, Path], name: str) -> str | None:
    """The longest known module that `name` (a.b.c or a.b.c.attr) names."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_pkg: bool,
             modules: dict[str, Path]) -> set[str]:
    """The product modules one import statement names (the most specific each)."""
    if isinstance(node, ast.Import):
        return {m for a in node.names if (m := _resolve(modules, a.name))}
    base = node.module or ""
    if node.level:
        pkg = here.split(".") if is_pkg else here.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    out = set()
    for a in node.names:
        # `from pkg import mod` names the module; `from pkg import attr` the package
        sub = f"{base}.{a.name}"
        m = sub if sub in modules else _resolve(modules, base)
        if m:
            out.add(m)
    return out


def edges(root: Path) -> list[Edge]:
    """Every import of one product module by another."""
    modules = product_files(root)
    out: list[Edge] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_pkg = path.name == "__init__.py"

        def visit(node: ast.AST, lazy: bool, typing: bool, name: str = name,
                  is_pkg: bool = is_pkg) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for dst in _targets(child, name, is_pkg, modules) - {name}:
                        out.append(Edge(name, dst, child.lineno, lazy, typing))
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, True, typing)
                elif isinstance(child, ast.If) and _is_type_checking(child.test):
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), lazy, True)
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), lazy, typing)
                else:
                    visit(child, lazy, typing)

        visit(tree, False, False)
    return out


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def concept(module: str, modules: dict[str, Path]) -> str:
    """The folder a module lives in (a package's own `__init__` belongs to that package)."""
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def circles(root: Path, *, include_typing: bool = False) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in product_files(root)}
    for e in edges(root):
        if include_typing or not e.typing:
            graph[e.src].add(e.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        group.append(m)
                        if m == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return out
