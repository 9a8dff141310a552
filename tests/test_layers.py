"""The import graph, read with `ast`: dependencies point down the floors, no cycles, no Dagster below.

Floors: chunking < retrieval < evaluation < pipeline < assets < orchestration. Every import counts
(module level, inside functions, and under `if TYPE_CHECKING:`).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

FLOORS = ("chunking", "retrieval", "evaluation", "pipeline", "assets", "orchestration")
LIBRARIES = ("chunking", "retrieval", "evaluation", "pipeline")


def _modules() -> dict[str, Path]:
    found = {}
    for top in FLOORS:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["chunkyard", *parts])] = path
    return found


def _floor(module: str) -> str:
    """The floor of a project module (`chunkyard.retrieval.x` -> retrieval)."""
    return module.split(".")[1]


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Every name `module` imports (project modules resolved, others as written)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return names


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _project_edges() -> list[tuple[str, str]]:
    return [(a, b) for a, names in GRAPH.items() for b in names if b in MODULES and b != a]


def _cycles(edges: list[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {b for _, b in edges}):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    chunks_step = "chunkyard.pipeline.steps.chunks"
    assert chunks_step in MODULES and "chunkyard.retrieval.indexing.chunks" in GRAPH[chunks_step]


def test_dependencies_point_down_the_floors() -> None:
    floor = {name: rank for rank, name in enumerate(FLOORS)}
    upward = [f"{a} -> {b}" for a, b in _project_edges() if floor[_floor(b)] > floor[_floor(a)]]
    assert upward == []


def test_libraries_never_import_dagster() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, names in GRAPH.items()
        if _floor(module) in LIBRARIES
        for name in names
        if name.split(".")[0] in ("dagster", "dagster_postgres", "dagster_webserver")
    ]
    assert offenders == []


def test_no_import_cycle_between_files() -> None:
    assert _cycles(_project_edges()) == []


def test_no_import_cycle_between_folders() -> None:
    """At every folder, its files and its subfolders (each taken whole) import without a loop;
    at the top, the floors themselves."""
    paths = {module: path.relative_to(REPO_ROOT).parts for module, path in MODULES.items()}
    folders = {parts[:i] for parts in paths.values() for i in range(len(parts))}
    cycles = []
    for folder in sorted(folders):

        def node(module: str, folder: tuple[str, ...] = folder) -> str | None:
            parts = paths[module]
            if parts[: len(folder)] != folder:
                return None
            return "/".join(parts[: len(folder) + 1])

        edges = [
            (na, nb)
            for a, b in _project_edges()
            if (na := node(a)) is not None and (nb := node(b)) is not None and na != nb
        ]
        cycles += _cycles(edges)
    assert cycles == []


DAGSTER_HOMES = ("assets", "orchestration")  # the only folders whose code may import Dagster


def _every_python_file() -> list[Path]:
    skipped = {".venv", ".git", ".chunkyard", "node_modules", "build", "dist"}
    return sorted(
        p for p in REPO_ROOT.rglob("*.py") if not skipped & set(p.relative_to(REPO_ROOT).parts[:-1])
    )


def _imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_only_assets_and_orchestration_import_dagster() -> None:
    """Every .py outside tests/ and benchmarks/: anything named dagster* is imported in assets/ and
    orchestration/ only (dagster, dagster_celery, dagster_postgres, dagster_webserver, ...)."""
    offenders = [
        f"{path.relative_to(REPO_ROOT)} imports {name}"
        for path in _every_python_file()
        if path.relative_to(REPO_ROOT).parts[0] not in ("tests", "benchmarks", *DAGSTER_HOMES)
        for name in _imported_names(path)
        if name.startswith("dagster")
    ]
    assert offenders == []
    assert any("dagster" in n for n in _imported_names(REPO_ROOT / "assets" / "definitions.py"))


def test_no_file_imports_dagster_internals() -> None:
    """No file at all (tests and benchmarks included) imports a private Dagster module (`dagster._...`,
    `dagster_celery._...`): only the public API, which keeps its promises across releases."""
    offenders = [
        f"{path.relative_to(REPO_ROOT)} imports {name}"
        for path in _every_python_file()
        for name in _imported_names(path)
        if name.startswith("dagster") and any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert offenders == []
