"""Upkeep of an index's tables: its HNSW graph's DDL, planner statistics (ANALYZE) and VACUUM."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from psycopg import Connection, sql


def set_maintenance_work_mem(conn: Connection, size: str) -> None:
    """The memory index builds of the caller's transaction may use (a Postgres size: `512MB`)."""
    conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(size)))


def create_graph(
    conn: Connection,
    table: str,
    name: str,
    dim: int,
    storage: str,
    m: int,
    ef_construction: int,
    work_mem: str,
) -> None:
    """The HNSW index `name` on `table`'s embedding cast to `storage(dim)` (`storage` one of
    VECTOR_STORAGES, checked by the caller), built with `work_mem` and one parallel worker."""
    set_maintenance_work_mem(conn, work_mem)
    conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw ((embedding::{}({})) {}) WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(name),
            sql.Identifier(table),
            sql.SQL(storage),  # one of VECTOR_STORAGES (checked by the caller)
            sql.Literal(int(dim)),
            sql.Identifier(f"{storage}_cosine_ops"),
            sql.Literal(m),
            sql.Literal(ef_construction),
        )
    )


def relation_exists(conn: Connection, name: str) -> bool:
    """Whether a table or index of this name exists."""
    return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None


def drop_graph(conn: Connection, name: str) -> None:
    """Drop the HNSW index `name` (it must exist)."""
    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))


def analyze(conn: Connection, table: str) -> None:
    """Fresh planner statistics for `table`."""
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def vacuum_analyze(conn: Connection, tables: Iterable[str]) -> None:
    """VACUUM (ANALYZE) each of `tables` (outside a transaction)."""
    for table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))


def bloated(conn: Connection, tables: Sequence[str], min_dead: int, dead_share: float) -> list[str]:
    """Those of `tables` whose dead rows reach `min_dead` and `dead_share` of their live rows (the counts
    of `pg_stat_user_tables`), sorted by name."""
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM (SELECT t.name, to_regclass(quote_ident(t.name)) AS rel"
            " FROM unnest(%s::text[]) AS t(name)) r"
            " WHERE pg_stat_get_dead_tuples(r.rel) >= greatest(%s, %s * pg_stat_get_live_tuples(r.rel))"
            " ORDER BY name",
            (list(tables), min_dead, dead_share),
        ).fetchall()
    ]


def vacuum(conn: Connection, table: str, *, analyze: bool) -> None:
    """VACUUM `table`, leaving it to whoever holds it (SKIP_LOCKED); with `analyze`, also its statistics."""
    options = "SKIP_LOCKED, ANALYZE" if analyze else "SKIP_LOCKED"
    conn.execute(sql.SQL("VACUUM ({}) {}").format(sql.SQL(options), sql.Identifier(table)))
