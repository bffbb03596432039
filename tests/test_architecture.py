"""The house of the package: its modules (rooms) and imports (arrows) read with ``ast``, without importing it.

Rules (docs/architecture.rst): the imports between twolayer modules run one way, with no circle, counting imports at
module level and inside functions alike (an ``if TYPE_CHECKING:`` block is not run and does not count); importing a
module also runs the ``__init__`` of every package above it that the importer is not inside, so that counts as an
arrow too; no module of a subpackage (scan/, landscape/, ode/) imports from the package ``__init__`` (the top of the
house, which imports everything: a name comes from the module that defines it); and no module imports another's
private ``_name`` (what is shared is a public name of the module that owns it).

``python tests/test_architecture.py`` prints the house, module by module, with what each imports.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "python" / "twolayer"
PACKAGE = "twolayer"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> source file of every Python module of the package (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _compiled(name: str, root: Path) -> bool:
    """Whether ``twolayer.<...>.name`` is a compiled extension of the package (``_core``, ``_cpu``): a leaf."""
    folder = root.joinpath(*name.split(".")[1:-1])
    leaf = name.split(".")[-1]
    return (folder / f"{leaf}.pyi").is_file() or any(folder.glob(f"{leaf}.*.so")) or any(folder.glob(f"{leaf}.*.pyd"))


def _import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it is inside a function (it runs when the function is called), leaving
    out ``if TYPE_CHECKING:`` blocks (never run)."""

    def visit(node: ast.AST, local: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, local
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            children: list[ast.AST] = list(node.orelse)
        else:
            children = list(ast.iter_child_nodes(node))
            local = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in children:
            yield from visit(child, local)

    yield from visit(tree, False)


class Import:
    """One import statement of a module, resolved: ``target`` is the twolayer module it runs (or None for another
    package); ``names`` what it takes from it (empty for ``import x``); ``local``: inside a function."""

    def __init__(self, module: str, line: int, target: str | None, names: tuple[str, ...], local: bool,
                 external: str = "") -> None:
        self.module, self.line, self.target, self.names, self.local, self.external = (
            module, line, target, names, local, external)


@functools.lru_cache(maxsize=8)
def imports(root: Path = ROOT) -> tuple[Import, ...]:
    """Every import of every module of the package (TYPE_CHECKING blocks left out), one per imported module."""
    return tuple(_resolved(root))


def _resolved(root: Path) -> Iterator[Import]:
    modules = _modules(root)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        here = module.split(".") if _is_package(module, modules) else module.split(".")[:-1]
        for node, local in _import_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    if name.split(".")[0] == PACKAGE:
                        yield Import(module, node.lineno, name, (), local)
                    else:
                        yield Import(module, node.lineno, None, (), local, external=name)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                if base.split(".")[0] != PACKAGE:
                    yield Import(module, node.lineno, None, (), local, external=base)
                    continue
                plain = []
                for alias in node.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        yield Import(module, node.lineno, sub, (), local)
                    elif _compiled(sub, root):
                        continue
                    else:
                        plain.append(alias.name)
                if plain:
                    yield Import(module, node.lineno, base, tuple(plain), local)


def house(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the twolayer modules importing it runs: its imports and the ``__init__`` of each package above them
    that the module is not inside (Python runs a package's ``__init__`` before any of its modules)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports(root):
        if imp.target is None or imp.target not in modules:
            continue
        parts = imp.target.split(".")
        for i in range(1, len(parts) + 1):
            runs = ".".join(parts[:i])
            if runs != imp.module and not imp.module.startswith(runs + "."):
                graph[imp.module].add(runs)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_in(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One circle through the component's first module, for the failure message."""
    members = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w in path]
        if back:
            return path[path.index(back[0]):] + [back[0]]
        step = next(w for w in nxt if w not in seen)
        path.append(step)
        seen.add(step)


needs_sources = pytest.mark.skipif(not ROOT.is_dir(), reason="no python/twolayer sources beside tests/")


@needs_sources
def test_no_import_circles() -> None:
    """The imports between twolayer modules run one way: no module reaches itself through them."""
    graph = house()
    found = [" -> ".join(_cycle_in(c, graph)) for c in circles(graph)]
    assert not found, "import circles:\n" + "\n".join(found)


def _from_package_init(root: Path = ROOT) -> list[str]:
    """The imports of names from the package ``__init__`` (``from .. import __version__``, ``from twolayer import
    Network``) by modules of its subpackages."""
    return [f"{imp.module}:{imp.line} takes {', '.join(imp.names)} from {PACKAGE}/__init__.py" for imp in imports(root)
            if imp.names and imp.target == PACKAGE and imp.module.count(".") >= 2]


@needs_sources
def test_no_import_from_the_package_init() -> None:
    """No module of a subpackage (scan/, landscape/, ode/) takes a name from the package ``__init__``: the names come
    from the module that defines them, and the ``__init__`` stays the top of the house (it imports everything)."""
    bad = _from_package_init()
    assert not bad, "imports from the package __init__:\n" + "\n".join(bad)


def _private_names(root: Path = ROOT) -> list[str]:
    """The private names (``_name``, not a module) one module takes from another."""
    return [f"{imp.module}:{imp.line} takes {name} from {imp.target}" for imp in imports(root) for name in imp.names
            if name.startswith("_") and not name.startswith("__")]


@needs_sources
def test_no_private_names_across_modules() -> None:
    """A name another module needs is a public name of the module that defines it (a private module such as
    ``_validation`` is fine: its names are the package's shared tools)."""
    bad = _private_names()
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


def test_the_checks_see_circles() -> None:
    """The rules catch what they are for: a two-module circle, a circle through a package ``__init__`` that a
    module of another package runs by importing a module inside it, and nothing on a one-way graph."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circles({"a": {"a"}}) == [["a"]]


def test_house_counts_local_imports_and_package_inits(tmp_path: Path) -> None:
    """Imports inside functions count, TYPE_CHECKING ones do not, and importing ``pkg.sub.mod`` from outside
    ``pkg.sub`` runs ``pkg.sub``'s ``__init__``."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a, sub\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X\n"
                              "else:\n    import json\ndef f():\n    from .sub.mod import g\n")
    (pkg / "b.py").write_text("X = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from .mod import g\n")
    (pkg / "sub" / "mod.py").write_text("from ..a import f\nfrom .. import __version__\ndef g(): pass\n")
    graph = house(pkg)
    assert graph[f"{PACKAGE}.a"] == {f"{PACKAGE}.sub", f"{PACKAGE}.sub.mod"}
    assert [(i.external, i.local) for i in imports(pkg) if i.module == f"{PACKAGE}.a" and i.target is None] == [
        ("typing", False), ("json", False)]
    assert [_cycle_in(c, graph) for c in circles(graph)] == [
        [f"{PACKAGE}.a", f"{PACKAGE}.sub", f"{PACKAGE}.sub.mod", f"{PACKAGE}.a"]]
    assert _from_package_init(pkg) == [f"{PACKAGE}.sub.mod:2 takes __version__ from {PACKAGE}/__init__.py"]
    (pkg / "b.py").write_text("from .sub.mod import _h, g as _g\nX = 1\n")
    imports.cache_clear()
    assert _private_names(pkg) == [f"{PACKAGE}.b:1 takes _h from {PACKAGE}.sub.mod"]


def main() -> None:
    """Print the house: each module with the twolayer modules it imports (``*``: only inside a function) and the
    other packages it imports inside functions (the deferred optional dependencies)."""
    by_module: dict[str, dict[str, bool]] = {}
    deferred: dict[str, set[str]] = {}
    for imp in imports():
        if imp.target is not None and imp.target != imp.module:
            seen = by_module.setdefault(imp.module, {})
            seen[imp.target] = seen.get(imp.target, True) and imp.local
        elif imp.external and imp.local:
            deferred.setdefault(imp.module, set()).add(imp.external)
    for module in sorted(_modules(ROOT)):
        targets = by_module.get(module, {})
        arrows = ", ".join(t.removeprefix(PACKAGE + ".") + ("*" if local else "")
                           for t, local in sorted(targets.items()))
        extra = f"  [deferred: {', '.join(sorted(deferred[module]))}]" if module in deferred else ""
        print(f"{module.removeprefix(PACKAGE + '.') or PACKAGE} -> {arrows or '-'}{extra}")


if __name__ == "__main__":
    main()
