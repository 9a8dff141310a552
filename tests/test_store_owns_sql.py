"""The store owns every SQL statement, and tables holding the same rows share one column list (real Postgres)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.migrations import (
    CHUNK_COLUMNS,
    INDEX_DOCUMENT_COLUMNS,
    POSTING_COLUMNS,
    STAGED_CHUNK_COLUMNS,
    STATS_COLUMNS,
    TERM_COLUMNS,
    column_names,
)

ROOT = Path(__file__).resolve().parents[1]
# every library folder; only retrieval/store/ may hold a statement
LIBRARY = ["chunkyard", "chunking", "retrieval", "evaluation", "pipeline", "assets", "orchestration"]
STATEMENT = re.compile(
    r"\b(SELECT|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|COPY\s+\w+|TRUNCATE|LOCK\s+TABLE|ANALYZE\s+[{\w]"
    r"|VACUUM\s*\(|SET\s+(LOCAL|TRANSACTION)|BEGIN(\s+ISOLATION|$)|COMMIT$|ROLLBACK$"
    r"|(CREATE|DROP|ALTER)\s+(TEMP\s+)?(TABLE|INDEX|EXTENSION))\b"
)


def _modules_outside_the_store() -> list[Path]:
    return [
        path
        for folder in LIBRARY
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.relative_to(ROOT).as_posix().startswith("retrieval/store/")
    ]


def _strings(path: Path) -> list[str]:
    """The string literals of a module, docstrings left out (they may name a statement they explain)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_module_outside_the_store_holds_a_sql_statement() -> None:
    modules = _modules_outside_the_store()
    assert len(modules) > 100  # the walk found the library
    found = {
        path.relative_to(ROOT).as_posix(): statements
        for path in modules
        if (statements := [text for text in _strings(path) if STATEMENT.search(text.strip())])
    }
    assert found == {}, f"SQL outside retrieval/store/; move it into a store module: {found}"


def test_the_statement_pattern_finds_the_statements_the_store_holds() -> None:
    """The check above is not vacuous: the same pattern finds the store's statements."""
    found = [text for text in _strings(ROOT / "retrieval" / "store" / "staging.py") if STATEMENT.search(text)]
    assert any(text.startswith("INSERT INTO staged_runs") for text in found)
    assert any(text.startswith("COPY staged_embeddings") for text in found)
    read = [
        text
        for text in _strings(ROOT / "retrieval" / "store" / "published_chunks.py")
        if STATEMENT.search(text)
    ]
    assert {"COMMIT", "ROLLBACK"} <= set(read)


# the store's modules that hold a statement: one per thing stored or purpose (documents, staging, published,
# published_chunks, bm25, indexes, aliases, keys, server, integrity, migrations); pool, db and the typed
# values hold none
MAX_MODULES_WITH_SQL = 11


def test_the_statements_live_in_a_few_store_modules() -> None:
    holding = sorted(
        path.relative_to(ROOT).as_posix()
        for folder in LIBRARY
        for path in (ROOT / folder).rglob("*.py")
        if any(STATEMENT.search(text.strip()) for text in _strings(path))
    )
    assert len(holding) >= 5  # the walk found the store
    assert len(holding) <= MAX_MODULES_WITH_SQL, f"{len(holding)} modules hold SQL: {holding}"


def _columns(store: Store, table: str) -> list[str]:
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
            (table,),
        ).fetchall()
    return [name for (name,) in rows]


@pytest.mark.parametrize(
    ("tables", "columns"),
    [
        (("staged_chunks",), STAGED_CHUNK_COLUMNS),
        (("chunks",), CHUNK_COLUMNS),
        (("bm25_postings",), POSTING_COLUMNS),
        (("bm25_terms", "staged_bm25_terms"), TERM_COLUMNS),
        (("bm25_stats",), STATS_COLUMNS),
        (("index_documents", "staged_documents"), INDEX_DOCUMENT_COLUMNS),
    ],
)
def test_the_tables_have_the_columns_of_their_one_list(
    store: Store, tables: tuple[str, ...], columns: tuple[tuple[str, str], ...]
) -> None:
    store.migrate()
    for table in tables:
        assert _columns(store, table) == ["index_name", *column_names(columns)], table


def test_a_published_chunk_is_the_staged_one_with_its_bm25_length_and_vector() -> None:
    assert column_names(CHUNK_COLUMNS) == (*column_names(STAGED_CHUNK_COLUMNS), "bm25_length", "embedding")
