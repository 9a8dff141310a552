"""Context scoring (`retrieval.query.context`) on real Postgres and the real model: chunks ranked with their surroundings."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.query import Searcher, SearchError
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec, SettingsError, load_index_configs
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.bm25 import Analyzer

from tests.test_indexing_support import ParagraphChunker

DOCUMENTS = {
    "volcano.md": [
        "Volcanoes erupt when magma rises through cracks in the crust.",
        "Its slopes are covered in grey ash and nothing grows there for years.",
        "The magma chamber of the volcano lies five kilometres below the summit.",
    ],
    "orchestra.md": [
        "The violinist tuned her instrument before the concert began.",
        "The audience waited in silence while the lights dimmed.",
        "Then the orchestra played a symphony about the sea.",
    ],
    "kitchen.md": [
        "A good sourdough needs a lively starter, flour, water and patience.",
        "Knead the dough, let it rest overnight and bake it in a hot oven.",
        "Crust colour comes from sugars caramelising in the heat of the oven.",
    ],
    "hiking.md": [
        "The trail climbs through pine forest to a grey ridge.",
        "Hikers carry water, a map and a warm jacket for the summit.",
        "From the top the whole valley is visible on a clear day.",
    ],
}
BM25 = {"k1": 1.5, "b": 0.75, "epsilon": 0.25, "analyzer": "english"}


def _spec(collection: str, name: str, context_scoring: dict | None = None) -> IndexSpec:
    config = IndexConfig(
        name=name,
        chunker={"strategy": "paragraph-test"},
        bm25=BM25,
        hybrid={"weight": 0.5, "candidates": 50},
        context_scoring=context_scoring or {},
    )
    return IndexSpec(collection, config)


@pytest.fixture(scope="module")
def collection(store: Store) -> str:
    name = f"ctx{uuid.uuid4().hex[:8]}"
    docs = [Document(doc_id, "\n\n".join(paragraphs)) for doc_id, paragraphs in DOCUMENTS.items()]
    store.documents.sync(name, docs, [])
    return name


@pytest.fixture(scope="module")
def plain_index(store: Store, embedder, collection: str) -> IndexSpec:
    spec = _spec(collection, "plain")
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


@pytest.fixture(scope="module")
def context_index(store: Store, embedder, collection: str) -> IndexSpec:
    """Same chunks (same config hash, so same chunk ids); context scoring on in the config."""
    spec = _spec(collection, "with-context", {"weight": 0.6, "span": "neighbours", "neighbours": 1})
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    return spec


@pytest.fixture(scope="module")
def searcher(store: Store, embedder) -> Searcher:
    return Searcher(store, embedder)


def _chunk_texts(store: Store, spec: IndexSpec) -> dict[str, tuple[str, int, str]]:
    """chunk_id -> (doc_id, start, text) straight from the partition."""
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT chunk_id, doc_id, start, text FROM chunks WHERE index_name = %s", (spec.name,)
        ).fetchall()
    return {cid: (doc, start, text) for cid, doc, start, text in rows}


def _rank(results, text: str) -> int:
    return next(r.rank for r in results if r.text == text)


def test_a_chunk_missing_the_query_words_is_ranked_up_by_its_context(plain_index, searcher) -> None:
    query = "where is the magma of a volcano"
    ash = DOCUMENTS["volcano.md"][1]  # shares no word with the query; both neighbours do
    plain = searcher.search(query, plain_index.name, k=12, mode="hybrid_weighted")
    with_context = searcher.search(query, plain_index.name, k=12, mode="hybrid_weighted", context_weight=0.6)
    assert "bm25" not in next(r for r in plain if r.text == ash).scores
    assert _rank(with_context, ash) < _rank(plain, ash)
    assert _rank(with_context, ash) <= 3
    # the chunks that hold the words stay on top: context adds evidence, it does not replace it
    assert {r.text for r in with_context[:3]} == set(DOCUMENTS["volcano.md"])


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid", "hybrid_weighted"])
def test_weight_zero_is_the_plain_mode(plain_index, searcher, mode: str) -> None:
    for query in ("magma volcano", "bread in the oven", "a grey summit"):
        plain = searcher.search(query, plain_index.name, k=8, mode=mode)
        zero = searcher.search(query, plain_index.name, k=8, mode=mode, context_weight=0.0)
        assert [(r.chunk_id, r.scores) for r in zero] == [(r.chunk_id, r.scores) for r in plain]


def test_the_index_config_turns_it_on_and_chunks_stay_exact_spans(
    store, plain_index, context_index, searcher
) -> None:
    assert plain_index.config.config_hash == context_index.config.config_hash  # same chunk ids
    docs = {d.id: d.text for d in store.documents.read(context_index.collection)}
    known_ids = set(_chunk_texts(store, plain_index))
    for mode in ("dense", "bm25", "hybrid", "hybrid_weighted"):
        configured = searcher.search("magma volcano ash", context_index.name, k=6, mode=mode)
        overridden = searcher.search(
            "magma volcano ash", plain_index.name, k=6, mode=mode, context_weight=0.6, context_neighbours=1
        )
        assert [r.chunk_id for r in configured] == [r.chunk_id for r in overridden]
        assert all("with_context" in r.scores and "context_ms" in r.timings for r in configured)
        for r in configured:
            assert docs[r.doc_id][r.start : r.end] == r.text and r.chunk_id in known_ids


def test_top_k_does_not_depend_on_k(context_index, searcher) -> None:
    for mode in ("dense", "bm25"):
        deep = searcher.search("summit of the volcano", context_index.name, k=10, mode=mode)
        shallow = searcher.search("summit of the volcano", context_index.name, k=3, mode=mode)
        assert [r.chunk_id for r in shallow] == [r.chunk_id for r in deep[:3]]


def test_context_bm25_is_bm25_of_the_concatenated_neighbours(store, plain_index, searcher) -> None:
    """Hand-computed: idf over chunks, tf and length over the context text, avgdl over all contexts."""
    analyzer = Analyzer("english")
    paragraphs = {doc: [analyzer.analyze(p) for p in ps] for doc, ps in DOCUMENTS.items()}
    chunks = [terms for ps in paragraphs.values() for terms in ps]
    n = len(chunks)
    df = Counter(t for terms in chunks for t in set(terms))
    raw_idf = {t: math.log(n - d + 0.5) - math.log(d + 0.5) for t, d in df.items()}
    floor = 0.25 * sum(raw_idf.values()) / len(raw_idf)

    def context_terms(doc: str, i: int, neighbours: int) -> list[str]:
        ps = paragraphs[doc]
        return [t for p in ps[max(0, i - neighbours) : i + neighbours + 1] for t in p]

    query = "ash and magma below the summit"
    for neighbours in (1, 2):
        contexts = {
            (d, i): context_terms(d, i, neighbours) for d, ps in DOCUMENTS.items() for i in range(len(ps))
        }
        avgdl = np.mean([len(t) for t in contexts.values()])
        expected = {}
        for (doc, i), terms in contexts.items():
            tf = Counter(terms)
            score = 0.0
            for q in analyzer.analyze(query):
                if q not in df:
                    continue
                idf = raw_idf[q] if raw_idf[q] >= 0 else floor
                score += idf * tf[q] * 2.5 / (tf[q] + 1.5 * (0.25 + 0.75 * len(terms) / avgdl))
            expected[DOCUMENTS[doc][i]] = score
        results = searcher.search(
            query, plain_index.name, k=12, mode="bm25", context_weight=0.5, context_neighbours=neighbours
        )
        assert results
        for r in results:
            assert r.scores["context_bm25"] == pytest.approx(expected[r.text], rel=1e-9), (neighbours, r.text)


def test_context_dense_is_the_cosine_to_the_mean_of_the_neighbour_vectors(
    plain_index, searcher, embedder
) -> None:
    query = "a grey summit"
    qvec = embedder.embed([query])[0]
    texts = {text: (doc, i) for doc, ps in DOCUMENTS.items() for i, text in enumerate(ps)}
    results = searcher.search(query, plain_index.name, k=12, mode="dense", context_weight=0.5)
    assert len(results) == 12
    for r in results:
        doc, i = texts[r.text]
        members = DOCUMENTS[doc][max(0, i - 1) : i + 2]
        mean = np.mean(embedder.embed(members), axis=0)
        expected = float(mean @ qvec / (np.linalg.norm(mean) * np.linalg.norm(qvec)))
        assert r.scores["context_dense"] == pytest.approx(expected, abs=1e-5)
        assert "context_bm25" not in r.scores


def test_parent_span_uses_the_hierarchical_parent(store, embedder, searcher) -> None:
    spec = IndexSpec(
        f"ctxh{uuid.uuid4().hex[:8]}",
        IndexConfig(
            name="hier-context",
            chunker={"strategy": "hierarchical", "size": 16, "parent_size": 48, "tokenizer": "model"},
            bm25=BM25,
            context_scoring={"weight": 0.5, "span": "parent"},
        ),
    )
    text = "\n\n".join(p for ps in DOCUMENTS.values() for p in ps)
    store.documents.sync(spec.collection, [Document("all.md", text)], [])
    build_index(store, spec, embedder)
    chunks = _chunk_texts(store, spec)
    with store.connection() as conn:
        parent_of = dict(
            conn.execute(
                "SELECT chunk_id, parent_id FROM chunks WHERE index_name = %s", (spec.name,)
            ).fetchall()
        )
    analyzer = Analyzer("english")
    query = "magma volcano"
    results = searcher.search(query, spec.name, k=20, mode="bm25")
    assert results and all("context_bm25" in r.scores for r in results)
    # chunks of one parent share one context, so one context score
    by_parent: dict[str, set[float]] = {}
    for r in results:
        by_parent.setdefault(parent_of[r.chunk_id], set()).add(round(r.scores["context_bm25"], 9))
    assert all(len(values) == 1 for values in by_parent.values())
    # a parent whose chunks hold no query word scores 0 for all of them
    for r in results:
        siblings = [t for cid, (_, _, t) in chunks.items() if parent_of[cid] == parent_of[r.chunk_id]]
        if not set(analyzer.analyze(" ".join(siblings))) & set(analyzer.analyze(query)):
            assert r.scores["context_bm25"] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_weight": 1.5}, "context_weight: must be a number between 0 and 1"),
        ({"context_weight": -0.1}, "context_weight"),
        (
            {"context_weight": 0.5, "context_neighbours": 0},
            "context_neighbours: must be an integer between 1",
        ),
        ({"context_weight": 0.5, "context_neighbours": 2.5}, "context_neighbours"),
    ],
)
def test_bad_overrides_are_clear_errors(plain_index, searcher, kwargs: dict, message: str) -> None:
    with pytest.raises(SearchError, match=message):
        searcher.search("magma", plain_index.name, k=3, mode="bm25", **kwargs)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{weight: 2}", "context_scoring.weight: must be a number between 0 and 1"),
        ("{weight: yes}", "context_scoring.weight"),
        ("{weight: 0.3, span: window}", "context_scoring.span: unknown 'window'"),
        ("{weight: 0.3, neighbours: 0}", "context_scoring.neighbours: must be an integer between 1 and 20"),
        ("{weight: 0.3, size: 250}", "context_scoring: unknown field(s) ['size']"),
        ("0.3", "context_scoring: expected a mapping"),
    ],
)
def test_bad_context_config_names_the_field(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(
        f"indexes:\n  small:\n    chunker: {{strategy: token, size: 64}}\n    context_scoring: {value}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as error:
        load_index_configs(path)
    assert "indexes.small" in str(error.value) and message in str(error.value)


def test_a_good_context_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(
        "indexes:\n  small:\n    chunker: {strategy: token, size: 64}\n"
        "    context_scoring: {weight: 0.4, span: neighbours, neighbours: 2}\n",
        encoding="utf-8",
    )
    config = load_index_configs(path)["small"]
    assert config.context_scoring == {"weight": 0.4, "span": "neighbours", "neighbours": 2}
    assert config.as_dict()["context_scoring"] == config.context_scoring


def test_focus_ranks_up_the_chunk_whose_query_words_stand_together(store, embedder, searcher) -> None:
    close = "The magma volcano stood there while lambs grazed quietly beside farmers tending orchards."
    far = "The magma stood there while lambs grazed quietly beside farmers tending orchards volcano."
    spec = _spec(f"ctxf{uuid.uuid4().hex[:8]}", "focus")
    others = [Document(f"other{i}.md", p) for i, p in enumerate(DOCUMENTS["orchestra.md"] * 2)]
    docs = [Document("close.md", close), Document("far.md", far), *others]  # others: positive idf
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    plain = searcher.search("magma volcano", spec.name, k=2, mode="bm25")
    assert plain[0].scores["bm25"] == pytest.approx(plain[1].scores["bm25"])  # same words, same length
    focused = searcher.search("magma volcano", spec.name, k=2, mode="bm25", focus_weight=0.5, focus_size=3)
    assert focused[0].text == close and focused[0].scores["focus"] > focused[1].scores["focus"]
    # a window as long as the chunk sees every word: no difference left
    whole = searcher.search("magma volcano", spec.name, k=2, mode="bm25", focus_weight=0.5, focus_size=50)
    assert whole[0].scores["focus"] == pytest.approx(whole[1].scores["focus"])


def test_weights_cannot_exceed_one_together(plain_index, searcher) -> None:
    with pytest.raises(SearchError, match="weight \\+ focus_weight must be at most 1"):
        searcher.search("magma", plain_index.name, mode="bm25", context_weight=0.7, focus_weight=0.5)
    with pytest.raises(SearchError, match="focus_size: must be an integer"):
        searcher.search("magma", plain_index.name, mode="bm25", focus_weight=0.2, focus_size=0)


def test_collapse_returns_one_copy_of_a_repeated_passage_the_earliest(store, embedder, searcher) -> None:
    repeated = "Net revenue rose eleven percent on strong subscription renewals."
    paragraphs = [
        "The board met in March to review the annual report.",
        repeated,
        "Operating costs were flat across all regions this year.",
        repeated,
        "Revenue guidance for next year assumes renewals stay strong.",
    ]
    spec = _spec(f"ctxd{uuid.uuid4().hex[:8]}", "dups")
    text = "\n\n".join(paragraphs)
    store.documents.sync(spec.collection, [Document("report.md", text)], [])
    build_index(store, spec, embedder, chunker=ParagraphChunker(spec.config.config_hash))
    first_start = text.index(repeated)
    for mode in ("bm25", "hybrid_weighted"):
        plain = searcher.search("net revenue subscription renewals", spec.name, k=3, mode=mode)
        assert [r.text for r in plain[:2]] == [repeated, repeated]  # two slots, one passage
        collapsed = searcher.search(
            "net revenue subscription renewals", spec.name, k=3, mode=mode, collapse_duplicates=True
        )
        # bm25 matches three chunks (two copies + the guidance paragraph); dense fills the top 3
        assert [r.text for r in collapsed].count(repeated) == 1
        assert len(collapsed) == (2 if mode == "bm25" else 3)
        assert collapsed[0].text == repeated and collapsed[0].start == first_start
        assert text[collapsed[0].start : collapsed[0].end] == repeated


def test_collapse_duplicates_config_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(
        "indexes:\n  small:\n    chunker: {strategy: token, size: 64}\n    collapse_duplicates: maybe\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError, match="indexes.small.collapse_duplicates: must be true or false"):
        load_index_configs(path)


def test_the_http_service_ranks_with_the_same_code_path(plain_index, context_index, searcher) -> None:
    from chunkyard.retrieval.api.service import create_app
    from fastapi.testclient import TestClient

    http = TestClient(create_app(searcher), raise_server_exceptions=False)
    query = "where is the magma of a volcano"
    for body, kwargs in (
        ({"index": context_index.name}, {}),  # the index config's context_scoring
        (
            {
                "index": plain_index.name,
                "context_weight": 0.5,
                "focus_weight": 0.2,
                "collapse_duplicates": True,
            },
            {"context_weight": 0.5, "focus_weight": 0.2, "collapse_duplicates": True},
        ),
    ):
        response = http.post("/v1/search", json={"query": query, "k": 5, "mode": "hybrid_weighted", **body})
        assert response.status_code == 200, response.text
        served = [(r["chunk_id"], r["scores"]["with_context"]) for r in response.json()["results"]]
        direct = searcher.search(query, body["index"], k=5, mode="hybrid_weighted", **kwargs)
        assert served == [(r.chunk_id, r.scores["with_context"]) for r in direct]
    bad = http.post(
        "/v1/search",
        json={"query": query, "index": plain_index.name, "context_weight": 0.8, "focus_weight": 0.5},
    )
    assert bad.status_code == 400 and "at most 1" in bad.json()["detail"]


CONTEXT_KEYS_COMPARED = ("context_bm25", "context_dense", "focus", "context", "with_context")


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid", "hybrid_weighted"])
def test_in_memory_context_statistics_give_the_per_query_sql_scores(
    store, embedder, plain_index, mode
) -> None:
    """The memory backend (statistics loaded once per version) ranks and scores as the SQL one."""
    from_sql = Searcher(store, embedder, context_backend="sql")
    in_memory = Searcher(store, embedder, context_backend="memory")
    for query in ("where is the magma of a volcano", "bread in the oven", "a grey summit", "zzz unknown"):
        for options in (
            {"context_weight": 0.6, "context_neighbours": 1},
            {"context_weight": 0.45, "context_neighbours": 2, "focus_weight": 0.2, "focus_size": 4},
        ):
            expected = from_sql.search(query, plain_index.name, k=12, mode=mode, **options)
            got = in_memory.search(query, plain_index.name, k=12, mode=mode, **options)
            assert [r.chunk_id for r in got] == [r.chunk_id for r in expected]
            for r, e in zip(got, expected, strict=True):
                assert set(r.scores) == set(e.scores)
                for key in CONTEXT_KEYS_COMPARED:
                    if key in e.scores:  # pgvector sums float32: cosines agree to float noise
                        assert r.scores[key] == pytest.approx(e.scores[key], rel=1e-9, abs=1e-6), (query, key)


def test_context_scoring_sends_no_query_of_its_own(store, embedder, plain_index, monkeypatch) -> None:
    """After the first query of a version, context scoring reads nothing from Postgres: a search
    with context (and focus) sends exactly the statements of the same search without it."""
    import threading

    import psycopg

    searcher = Searcher(store, embedder, context_backend="memory")
    searcher.warm(plain_index.name)  # the in-memory BM25 copy, so no reload thread runs meanwhile
    query = "where is the magma of a volcano"
    with_context = {"context_weight": 0.45, "context_neighbours": 2, "focus_weight": 0.2}
    searcher.search(query, plain_index.name, k=5, mode="hybrid_weighted", **with_context)  # loads the version
    sent: list[str] = []
    execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
    this_thread = threading.get_ident()

    def record(cursor: psycopg.Cursor, statement) -> None:
        if threading.get_ident() == this_thread:  # other tests' searchers may still reload in the background
            sent.append(statement if isinstance(statement, str) else statement.as_string(cursor))

    def recording_execute(self, statement, *args, **kwargs):
        record(self, statement)
        return execute(self, statement, *args, **kwargs)

    def recording_copy(self, statement, *args, **kwargs):
        record(self, statement)
        return copy(self, statement, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording_execute)
    monkeypatch.setattr(psycopg.Cursor, "copy", recording_copy)
    for mode in ("dense", "bm25", "hybrid_weighted"):
        sent.clear()
        searcher.search(query, plain_index.name, k=5, mode=mode, **with_context)
        context_statements = list(sent)
        sent.clear()
        # the same first stage without context scoring (collapsing reads the in-memory layout too)
        searcher.search(query, plain_index.name, k=5, mode=mode, collapse_duplicates=True)
        assert context_statements == sent, mode
        assert not any("bm25_postings" in s or "bm25_terms" in s or "avg(" in s for s in context_statements)
    # the recording sees what the per-query path sends
    from_sql = Searcher(store, embedder, context_backend="sql")
    from_sql.warm(plain_index.name)
    sent.clear()
    from_sql.search(query, plain_index.name, k=5, mode="hybrid_weighted", **with_context)
    assert any("bm25_postings" in s for s in sent) and any("avg(" in s for s in sent)


def test_window_scoring_at_hits_equals_scoring_every_window() -> None:
    """Only windows starting at a query term's hit are scored, with bit-identical best scores."""
    from chunkyard.retrieval.query.context.windows import _best_windows, _best_windows_at_hits

    rng = np.random.default_rng(7)
    for _ in range(400):
        lengths = rng.integers(0, int(rng.choice([3, 60, 200])), int(rng.integers(1, 30)))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        vocabulary = int(rng.integers(1, 25))
        ids = rng.integers(-1, vocabulary, int(offsets[-1])).astype(np.int32)
        known = np.flatnonzero(ids >= 0)
        order = np.argsort(ids[known], kind="stable")
        indptr = np.searchsorted(ids[known][order], np.arange(vocabulary + 1)).astype(np.int64)
        positions = rng.permutation(len(lengths))[: int(rng.integers(1, len(lengths) + 1))].astype(np.int64)
        terms = rng.permutation(vocabulary)[: int(rng.integers(1, vocabulary + 1))].astype(np.int64)
        w = rng.random(len(terms)) * 5
        size = int(rng.integers(1, 40))
        expected = _best_windows(ids, offsets, positions, terms, w, size, 1.2)
        chunk_of = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
        found = _best_windows_at_hits(indptr, known[order], chunk_of, offsets, positions, terms, w, size, 1.2)
        assert np.array_equal(found, expected)
