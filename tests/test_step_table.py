"""The index steps are declared once (`pipeline.graph.INDEX_STEPS`) and every path reads that table."""

from __future__ import annotations

import ast
from pathlib import Path

from chunkyard.pipeline.graph import INDEX_STEPS, PUBLISH, STEP_NAMES, step

from tests.conftest import REPO_ROOT

LIBRARY = ("chunkyard", "chunking", "retrieval", "evaluation", "pipeline", "assets", "orchestration")
# Literals that may name two steps: the table itself (a step's `reads`), and the stage timings'
# phases, which split the run's time (load, chunk, embed, bm25, publish, hnsw), not its steps.
ALLOWED = {
    ("pipeline/graph.py", "reads"),
    ("retrieval/indexing/stage_reports.py", "STAGES"),
    ("retrieval/indexing/stage_reports.py", "seconds"),
}


def _library_files() -> list[Path]:
    return sorted(p for top in LIBRARY for p in (REPO_ROOT / top).rglob("*.py"))


def _owner(tree: ast.AST, node: ast.AST) -> str:
    """The name a literal is bound to (an assignment's target or a call's keyword), else ''."""
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node:
            target = parent.targets[0] if isinstance(parent, ast.Assign) else parent.target
            return target.id if isinstance(target, ast.Name) else ""
        if isinstance(parent, ast.keyword) and parent.value is node:
            return parent.arg or ""
    return ""


def test_no_second_list_of_the_step_names_in_library_code() -> None:
    """No tuple, list, set or dict keys in library code name two or more index steps, outside the table."""
    found = []
    for path in _library_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            items = (
                node.keys
                if isinstance(node, ast.Dict)
                else node.elts
                if isinstance(node, ast.Tuple | ast.List | ast.Set)
                else []
            )
            named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in STEP_NAMES}
            if len(named) >= 2:
                where = (path.relative_to(REPO_ROOT).as_posix(), _owner(tree, node))
                if where not in ALLOWED:
                    found.append(f"{where[0]}:{node.lineno} {sorted(named)}")
    assert found == [], "a second list of the step names (read `pipeline.graph.INDEX_STEPS`):\n" + "\n".join(
        found
    )


def test_no_library_module_imports_another_by_a_name_string() -> None:
    """No `importlib.import_module` or `__import__` in library code: every import is one a reader
    (and the layer test) can follow."""
    found = []
    for path in _library_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.func.attr
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                else node.func.id
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                else ""
            )
            if name in ("import_module", "__import__"):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert found == []


def test_the_table_is_a_graph_in_order() -> None:
    """Each step reads only steps declared before it; the publish is last; names are unique."""
    seen: list[str] = []
    for declared in INDEX_STEPS:
        assert set(declared.reads) <= set(seen), f"{declared.name} reads a later or unknown step"
        assert declared.name not in seen
        seen.append(declared.name)
    assert PUBLISH == seen[-1] == "publish"
    assert step("bm25").reads == ("chunks",)


def test_the_assets_are_made_from_the_table(tmp_path: Path) -> None:
    """One index's assets: one per step, keyed by the step's name, depending on what it reads, with
    its declared checks (error-level ones blocking)."""
    from chunkyard.assets.indexes import build_index_assets
    from chunkyard.assets.keys import documents_key, index_key
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs

    spec = IndexSpec("demo", load_index_configs()["recursive-256"])
    assets = {a.key.path[-1]: a for a in build_index_assets(spec)}
    assert list(assets) == list(STEP_NAMES)
    for declared in INDEX_STEPS:
        asset = assets[declared.name]
        parents = {dep.asset_key for dep in asset.specs_by_key[asset.key].deps}
        expected = {index_key(spec.name, r) for r in declared.reads} or {documents_key("demo")}
        assert parents == expected
        checks = {c.name: c.blocking for c in asset.check_specs}
        assert checks == {c.name: c.severity == "error" for c in declared.checks}
