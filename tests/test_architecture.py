"""The package layering, checked from the source: which WarpForge package may import which.

This file is the one place the allowed dependencies live (``ALLOWED`` below); docs/architecture.md explains
them and points here. The check reads every module's imports with ``ast`` (no import is executed, no new
dependency): top-level imports, imports inside functions (lazy ones run too, just later) and imports under
``if TYPE_CHECKING:`` alike. Only the cycle check leaves the ``TYPE_CHECKING`` ones out, because they never
run: a feature module of the language server names the server class in its annotations that way.

A new package fails ``test_every_package_is_placed`` until it is given a row in ``ALLOWED`` and a place in
``ORDER``: placing it is a design decision, not something to discover later from a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "server" / "warpforge"

#: The pipeline, bottom first: a unit may only import units before it (``test_table_follows_the_order``).
#: ``warpforge`` is the package root (``__version__``); ``cli`` is the command-line front end: ``cli.py``,
#: ``__main__.py`` and ``commands/`` (the subcommands ``cli`` registers by name at run time).
ORDER: tuple[str, ...] = (
    "warpforge", "exitcodes", "defaults", "install", "store",
    "compiler", "cuda", "spec", "rag", "gpu", "profile", "search", "policy", "selftest",
    "app", "lsp", "cli",
)

_TOOLS = frozenset({"warpforge", "exitcodes", "defaults", "install", "store"})
#: unit -> the units it may import (besides itself). Tighter than ``ORDER`` where the code allows: search
#: is inverted over protocols (an evaluator, a policy), so it needs neither gpu nor profile nor policy.
ALLOWED: dict[str, frozenset[str]] = {
    "warpforge": frozenset(),
    "exitcodes": frozenset(),
    "defaults": frozenset(),
    "install": frozenset(),
    "store": frozenset({"defaults"}),
    # cuda and spec read the project's build description (compiler.project: its -I folders hold the headers
    # whose typedefs and macros a kernel's types and sizes use; its folder is the project root where launch
    # sites in other files are looked for); compiler imports neither, so this adds no cycle
    "cuda": frozenset({"warpforge", "compiler"}),
    "spec": frozenset({"warpforge", "cuda", "compiler"}),
    "compiler": frozenset({"warpforge", "defaults"}),
    "rag": frozenset({"warpforge", "defaults", "cuda", "store"}),
    "gpu": _TOOLS | {"cuda", "spec", "compiler"},
    "profile": _TOOLS | {"cuda", "spec", "compiler", "gpu"},
    "search": _TOOLS | {"cuda", "spec"},
    "policy": _TOOLS | {"cuda", "spec", "compiler", "rag", "profile", "search"},
    "selftest": _TOOLS | {"cuda", "spec", "compiler", "gpu"},
    "app": _TOOLS | {"cuda", "spec", "compiler", "rag", "gpu", "profile", "search", "policy", "selftest"},
    "lsp": _TOOLS | {"cuda", "spec", "compiler", "rag", "gpu", "profile", "search", "policy", "app"},
    "cli": _TOOLS | {"cuda", "spec", "compiler", "rag", "gpu", "profile", "search", "policy", "selftest", "app",
                     "lsp"},
}

#: the only module of the command line that may start the language server
SERVES_LSP = "warpforge.commands.serve"


@dataclass(frozen=True)
class Edge:
    source: str  # importing module, dotted
    target: str  # imported module (or package), dotted
    path: Path
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: never executed


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


MODULES: dict[str, Path] = {_module_name(p)[0]: p for p in sorted(PKG.rglob("*.py"))}


def unit(module: str) -> str:
    """The unit a module belongs to: ``warpforge.gpu.worker`` -> ``gpu``; the CLI's modules -> ``cli``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "warpforge"
    return "cli" if parts[1] in ("cli", "__main__", "commands") else parts[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def _targets(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    # ``from pkg import sub`` imports the module ``pkg.sub``; ``from mod import name`` imports ``mod``.
    return sorted({f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names})


def edges() -> list[Edge]:
    out = []
    for module, path in MODULES.items():
        _, is_pkg = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, type_only in _imports(tree):
            for target in _targets(module, is_pkg, node):
                if target == "warpforge" or target.startswith("warpforge."):
                    out.append(Edge(module, target, path, node.lineno, type_only))
    return out


EDGES = edges()


def _where(e: Edge) -> str:
    return f"{e.path.relative_to(PKG.parents[1])}:{e.line}: {e.source} imports {e.target}"


def _cross(e: Edge) -> tuple[str, str]:
    return unit(e.source), unit(e.target)


def test_the_reader_sees_the_imports() -> None:
    """Guards the checks below against reading nothing: known edges of each kind are found."""
    found = {(e.source, e.target, e.type_only) for e in EDGES}
    assert ("warpforge.gpu.evaluator", "warpforge.gpu.pool_build", False) in found  # relative, top level
    assert ("warpforge.lsp.jobs", "warpforge.lsp.server", True) in found  # under TYPE_CHECKING
    assert ("warpforge.commands.serve", "warpforge.lsp.server", False) in found  # inside a function
    assert ("warpforge.lsp.server", "warpforge.lsp.actions", False) in found  # ``from . import actions``
    assert len(MODULES) > 100 and len(EDGES) > 500


def test_every_package_is_placed() -> None:
    units = {unit(m) for m in MODULES}
    missing = sorted(units - set(ALLOWED))
    assert not missing, (f"{', '.join(missing)}: not placed in the layering; add a row to ALLOWED and a place in "
                         "ORDER in tests/test_architecture.py, and a line to docs/architecture.md")
    assert set(ALLOWED) == set(ORDER)


def test_table_follows_the_order() -> None:
    """Every allowed dependency points down the pipeline, so packages can never import each other in a cycle."""
    wrong = [f"{u} -> {d}" for u, deps in ALLOWED.items() for d in sorted(deps) if ORDER.index(d) >= ORDER.index(u)]
    assert not wrong, f"allowed dependencies that point up (or sideways): {wrong}"


def test_packages_import_only_what_they_may() -> None:
    bad = [_where(e) for e in EDGES if _cross(e)[0] != _cross(e)[1] and _cross(e)[1] not in ALLOWED[_cross(e)[0]]]
    assert not bad, "imports the layering does not allow (see docs/architecture.md):\n" + "\n".join(bad)


@pytest.mark.parametrize(("importer", "forbidden"), [
    ("gpu", {"search", "policy", "profile", "app", "lsp", "cli"}),
    ("compiler", {"gpu", "profile", "search", "policy", "app", "lsp", "cli"}),
    ("search", {"policy", "app", "lsp", "cli"}),
    ("policy", {"app", "lsp", "cli"}),
])
def test_the_issue_contract(importer: str, forbidden: set[str]) -> None:
    """Issue 15's contract, checked on the imports themselves (so loosening ``ALLOWED`` cannot undo it)."""
    bad = [_where(e) for e in EDGES if unit(e.source) == importer and unit(e.target) in forbidden]
    assert not bad, "\n".join(bad)
    assert not forbidden & ALLOWED[importer]


def test_only_the_entry_points_import_the_front_ends() -> None:
    """Nothing imports ``lsp`` or the CLI's commands but the CLI itself; of the commands only ``serve`` the lsp."""
    def allowed(e: Edge) -> bool:
        src, dst = _cross(e)
        if dst == "cli":
            return src == "cli"
        if dst == "lsp":
            return src == "lsp" or e.source == SERVES_LSP
        return True

    bad = [_where(e) for e in EDGES if not allowed(e)]
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_modules() -> None:
    """No module imports itself through others, lazily (inside a function) or not."""
    graph: dict[str, set[str]] = {}
    for e in EDGES:
        if not e.type_only and e.source != e.target:
            graph.setdefault(e.source, set()).add(e.target)
    cycles = _cycles(graph)
    detail = ["  " + _where(e) for e in EDGES
              if not e.type_only and any(e.source in c and e.target in c for c in cycles)]
    assert not cycles, "import cycles:\n" + "\n".join(detail)
