"""``import hpsearch`` and ``hpsearch --help`` stay cheap: no torch, distributed or mlflow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "distributed", "mlflow")


def _modules_after(code: str) -> set[str]:
    out = (
        subprocess.run(
            [sys.executable, "-c", f"import sys\n{code}\nprint(','.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return set(out.split(","))


def test_import_hpsearch_is_light():
    loaded = _modules_after("import hpsearch")
    assert not [m for m in HEAVY if m in loaded]


def test_cli_help_is_light():
    loaded = _modules_after(
        "import sys\nfrom hpsearch.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert not [m for m in HEAVY if m in loaded]


# --- No import cycles inside hpsearch -------------------------------------------------------
#
# Every ``import`` / ``from ... import`` that names an hpsearch module is an edge, including
# imports inside functions (a lazy import still ties the two modules together) but not those
# under ``if TYPE_CHECKING:``. ``from hpsearch.pkg import name`` is resolved through the
# package's ``__init__`` to the module that defines ``name``.

ROOT = Path(__file__).resolve().parents[1] / "hpsearch"

#: Cycles that pass through modules being restructured elsewhere (spec, tracking, study, cli).
#: Each entry is one cycle, as the sorted tuple of its modules; remove an entry once its
#: cycle is gone (the test then fails if it comes back).
ALLOWED_CYCLES: set[tuple[str, ...]] = set()


def _module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """``(target module, names imported from it)`` of every runtime import in ``tree``."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            found.append((base, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """hpsearch's modules and the hpsearch modules each one imports at run time."""
    paths = _module_names()
    parsed = {name: ast.parse(path.read_text(), str(path)) for name, path in paths.items()}
    imports = {
        name: _imports(tree, name, paths[name].name == "__init__.py")
        for name, tree in parsed.items()
    }

    def origin(package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module that defines ``name`` of ``package`` (through its re-exports)."""
        if f"{package}.{name}" in paths:
            return f"{package}.{name}"
        if package in seen:
            return package
        for target, names in imports.get(package, []):
            if name in names and target in paths:
                if paths[target].name == "__init__.py" and target != package:
                    return origin(target, name, seen | {package})
                return target
        return package

    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, found in imports.items():
        for target, names in found:
            if target not in paths:
                continue
            is_package = paths[target].name == "__init__.py"
            if not names or not is_package:
                graph[name].add(target)
                continue
            for imported in names:
                graph[name].add(origin(target, imported))
        graph[name].discard(name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each with one
    cycle through it, as a list of modules that starts and ends with the same one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return sorted(component)


def test_import_graph_sees_lazy_imports_and_reexports():
    graph = import_graph()
    # a function-level import, and a package re-export resolved to its module
    assert "hpsearch.trial._checkpoint" in graph["hpsearch.training._objective"]
    assert "hpsearch.data._base" in graph["hpsearch.training._objective"]


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    unexpected = [c for c in cycles if tuple(sorted(set(c))) not in ALLOWED_CYCLES]
    stale = ALLOWED_CYCLES - {tuple(sorted(set(c))) for c in cycles}
    assert not unexpected, "import cycles in hpsearch:\n" + "\n".join(
        " -> ".join(c) for c in unexpected
    )
    assert not stale, f"allowed cycles that are gone (remove them): {sorted(stale)}"
