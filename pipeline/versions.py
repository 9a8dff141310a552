"""Code versions derived from imports: an asset is stale exactly when code its step runs has changed.

Each kind of asset is built by one step module (`pipeline.steps.<kind>`). Its code version hashes
the settings that shape the asset plus the source of every project module the step can run: the
transitive closure of its project-internal imports, found with `ast` (module- and function-level
imports; `if TYPE_CHECKING:` imports run nothing and are left out) together with the packages'
`__init__` modules Python runs on the way. No list is kept by hand, so none can drift.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from chunkyard.chunking.registry import chunker_modules
from chunkyard.retrieval.config import IndexConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
# The project's library packages: imports of anything else (the standard library, numpy, ...) are
# not followed.
PACKAGES = ("chunking", "retrieval", "evaluation", "pipeline")
KINDS = ("documents", "chunks", "embeddings", "bm25", "index", "evaluation", "leaderboard", "promotion")


def step_module(kind: str) -> str:
    """The module whose step builds assets of `kind`."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    return f"chunkyard.pipeline.steps.{kind}"


def module_path(module: str, root: Path = REPO_ROOT) -> Path | None:
    """The file of a project module (`chunkyard.a.b` -> a/b.py or a/b/__init__.py); None if not one."""
    parts = module.split(".")
    if parts[0] != "chunkyard" or len(parts) < 2 or parts[1] not in PACKAGES:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, *, functions: bool) -> list[ast.Import | ast.ImportFrom]:
    """A module's import statements, except under `if TYPE_CHECKING:`; inside function bodies only
    if `functions` (they run when the function is called, not when the module is imported)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if not functions and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(module: str, root: Path = REPO_ROOT, *, functions: bool = True) -> set[str]:
    """The project modules that `module`'s source imports directly (`from a import b` names the
    module a.b when b is one, else a); with `functions=False` only what importing it runs."""
    path = module_path(module, root)
    if path is None:
        return set()
    stat = path.stat()
    return set(_imports_of(module, path, (stat.st_mtime_ns, stat.st_size), root, functions))


@functools.cache
def _imports_of(
    module: str, path: Path, stamp: tuple[int, int], root: Path, functions: bool
) -> frozenset[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in _import_nodes(tree, functions=functions):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            names = [
                f"{base}.{alias.name}" if module_path(f"{base}.{alias.name}", root) else base
                for alias in node.names
            ]
        found.update(name for name in names if module_path(name, root) is not None)
    return frozenset(found)


def import_closure(module: str, root: Path = REPO_ROOT) -> set[str]:
    """`module` and every project module it can run: what it imports (function-level imports
    too), transitively, plus the packages Python runs on the way (their module-level imports)."""
    used: set[str] = set()  # imported by name: any of its functions may run
    loaded: set[str] = set()  # a package run on the way to a module: only its import runs
    pending = [(module, True)]
    while pending:
        name, by_name = pending.pop()
        if name in used or (not by_name and name in loaded) or module_path(name, root) is None:
            continue
        (used if by_name else loaded).add(name)
        parts = name.split(".")
        pending.extend((".".join(parts[:i]), False) for i in range(1, len(parts)))
        pending.extend((m, True) for m in imported_modules(name, root, functions=by_name))
    return used | loaded


def source_digest(modules: set[str], root: Path = REPO_ROOT) -> str:
    """Hash of the modules' sources (relative path and content), in a stable order."""
    digest = hashlib.sha256()
    for path in sorted({p for m in modules if (p := module_path(m, root)) is not None}):
        digest.update(path.relative_to(root).as_posix().encode())
        stat = path.stat()
        digest.update(_file_digest(path, (stat.st_mtime_ns, stat.st_size)).encode())
    return digest.hexdigest()


@functools.cache
def _file_digest(path: Path, stamp: tuple[int, int]) -> str:
    # `stamp` (mtime, size) keys the cache: an edited file is read again.
    return hashlib.sha256(path.read_bytes()).hexdigest()


def code_version(kind: str, settings: Any, root: Path = REPO_ROOT) -> str:
    """`kind` + the settings that shape it + the source its step runs -> a short stable version.

    The step reaches its chunking strategy through the registry by name, so the strategy modules
    the settings' `chunker:` names (its own and its base strategy's) are added with their imports:
    editing one strategy changes the versions of its own configs' assets only."""
    payload = json.dumps({"kind": kind, "settings": settings}, sort_keys=True, default=str)
    digest = hashlib.sha256(payload.encode())
    modules = import_closure(step_module(kind), root)
    chunker = settings.get("chunker") if isinstance(settings, dict) else None
    for module in chunker_modules(chunker) if isinstance(chunker, dict) else []:
        modules |= import_closure(module, root)
    digest.update(source_digest(modules, root).encode())
    return digest.hexdigest()[:16]


def index_settings(config: IndexConfig, kind: str) -> dict[str, Any]:
    """The parts of an `IndexConfig` that shape an asset of `kind` (the description does not)."""
    chunk = {"chunker": config.chunker, "embedding_model": config.embedding_model}
    if kind == "chunks":
        return chunk
    if kind == "embeddings":
        return {**chunk, "embedder": config.embedder}
    if kind == "bm25":
        return {**chunk, "bm25": config.bm25}
    if kind == "index":
        return {**chunk, "embedder": config.embedder, "bm25": config.bm25}
    if kind == "evaluation":
        return {
            **chunk,
            "embedder": config.embedder,
            "bm25": config.bm25,
            "hybrid": config.hybrid,
            "rerank": config.rerank,
            "context_scoring": config.context_scoring,
            "collapse_duplicates": config.collapse_duplicates,
            "coarse": config.coarse,
        }
    raise ValueError(
        f"index asset kind: expected chunks, embeddings, bm25, index or evaluation, got {kind!r}"
    )
