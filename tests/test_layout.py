"""The package's shape, read from its import graph: the storage seam holds, packages form no
cycles, and modules import each other one way.

The graph is read from the source (every ``import`` and ``from … import``, at any depth, in
functions and under ``TYPE_CHECKING`` too), so a lazy import does not hide a dependency.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import stratamem

PACKAGE = Path(stratamem.__file__).parent

# Database drivers and backend modules: only the store may import them.
DRIVERS = ("sqlite3", "apsw", "psycopg", "psycopg_pool", "pgserver", "stratamem.store.sqlite")
BACKEND_OWNER = "stratamem.store"


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int
    runtime: bool  # False for an import under ``if TYPE_CHECKING:``


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, modules: set[str]) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to itself)."""
    if module in modules and (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists():
        return module
    return module.rpartition(".")[0]


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


@functools.cache
def edges() -> tuple[Edge, ...]:
    return tuple(_edges())


def _edges() -> Iterator[Edge]:
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        typing_only = _type_checking_lines(tree)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                # ``from stratamem.x import y`` may name a submodule y.
                targets += [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                yield Edge(source, target, node.lineno, node.lineno not in typing_only)


def all_modules() -> set[str]:
    return {module_name(p) for p in PACKAGE.rglob("*.py")}


def internal_edges() -> list[Edge]:
    modules = all_modules()
    return [e for e in edges() if e.target in modules and e.target != e.source]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_only_the_store_imports_a_database_driver() -> None:
    offenders = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges()
        if any(e.target == d or e.target.startswith(d + ".") for d in DRIVERS)
        and not (e.source == BACKEND_OWNER or e.source.startswith(BACKEND_OWNER + "."))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "layer", ["stratamem.retrieval", "stratamem.tree", "stratamem.api", "stratamem.cli"]
)
def test_upper_layers_speak_only_to_the_store_protocols(layer: str) -> None:
    offenders = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges()
        if (e.source == layer or e.source.startswith(layer + "."))
        and e.target.startswith("stratamem.store.")
        and e.target.split(".")[2] in {"sqlite", "postgres"}
    ]
    assert offenders == []


# The SQL both backends share, and the copy between them: written against the dialect and the
# stores' methods, so they name no driver and neither backend's modules (each backend's store
# puts the tables together with what differs; ``copy`` opens a store by its URL).
SHARED = (
    "stratamem.store.tables",
    "stratamem.store.dialect",
    "stratamem.store.copy",
    "stratamem.store.migrations",
)
BACKENDS = ("stratamem.store.sqlite", "stratamem.store.postgres")


def test_the_shared_store_code_imports_no_driver_and_no_backend() -> None:
    assert any(e.source.startswith(SHARED[0] + ".") for e in edges())  # the tables are read
    offenders = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges()
        if any(e.source == m or e.source.startswith(m + ".") for m in SHARED)
        and any(e.target == d or e.target.startswith(d + ".") for d in (*DRIVERS, *BACKENDS))
    ]
    assert offenders == []


def test_the_store_imports_nothing_above_it() -> None:
    # The access rule is a pure function of types, applied inside every backend's reads.
    allowed = (
        "stratamem.store",
        "stratamem.types",
        "stratamem.errors",
        "stratamem.extras",  # the import of a driver an extra brings, as the errors name it
        "stratamem.timeparse",
        "stratamem.access.gate",
    )
    offenders = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in internal_edges()
        if e.source.startswith("stratamem.store")
        and not any(e.target == a or e.target.startswith(a + ".") for a in allowed)
        and e.target != "stratamem"
    ]
    assert offenders == []


def test_packages_form_no_cycle() -> None:
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for e in internal_edges():
        a, b = package_of(e.source, modules), package_of(e.target, modules)
        if a != b and b != "stratamem" and not a.startswith(b + "."):
            # A package importing its own parent's ``__init__`` is not a cycle of packages.
            graph.setdefault(a, set()).add(b)
    assert cycles(graph) == []


def test_modules_import_each_other_one_way() -> None:
    graph: dict[str, set[str]] = {}
    for e in internal_edges():
        if e.runtime and e.target != "stratamem":
            graph.setdefault(e.source, set()).add(e.target)
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


# The API layer: what a door (the CLI, the servers) may import. Everything else is behind it.
API_LAYER = (
    "stratamem.api",
    "stratamem.ops",
    "stratamem.types",
    "stratamem.errors",
    "stratamem.config",
    "stratamem.extras",
    "stratamem.timeparse",
)
DOORS = ("stratamem.server", "stratamem.cli")


def _door_offenders(door: str) -> list[str]:
    return [
        f"{e.source}:{e.line} imports {e.target}"
        for e in internal_edges()
        if (e.source == door or e.source.startswith(door + "."))
        and e.target != "stratamem"
        and not any(e.target == a or e.target.startswith(a + ".") for a in (*API_LAYER, *DOORS))
    ]


def test_the_servers_import_only_the_api_layer() -> None:
    assert _door_offenders("stratamem.server") == []


def test_the_cli_imports_only_the_api_layer() -> None:
    assert _door_offenders("stratamem.cli") == []
