"""The windowed language identifier: py3langid's own features, scores and languages, proved and compared."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from chunkyard.chunking.types import Document
from chunkyard.retrieval.indexing.chunks import stage_chunks
from chunkyard.retrieval.lexical.language_identifier import WINDOW, WindowedIdentifier, load_identifier
from chunkyard.retrieval.lexical.languages import METADATA_KEY, SAMPLE_CHARS
from chunkyard.retrieval.store import Store
from py3langid.langid import MODEL_FILE, LanguageIdentifier, visit_counts

from tests.test_indexing_support import ParagraphChunker, make_spec, random_unit_vector_for

DATA = Path(__file__).parent / "data" / "multilingual"


@pytest.fixture(scope="module")
def identifiers() -> tuple[WindowedIdentifier, LanguageIdentifier]:
    return load_identifier(), LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _texts() -> list[str]:
    """Every multilingual test document, pieces of them, and random text in many scripts and bytes."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(DATA.glob("*/*.md"))]
    texts += [text[:n] for text in texts[:12] for n in (1, 2, 3, 4, 5, 6, 7, 40)]
    rng = random.Random(5)
    texts += ["".join(chr(rng.randrange(32, 0x3100)) for _ in range(rng.randrange(300))) for _ in range(60)]
    texts += [rng.randbytes(rng.randrange(2000)).decode("utf-8", "replace") for _ in range(60)]
    return texts + ["", " ", "12 345 -- ()", "HELLO WORLD", "SQL", "Tom", "tea?", " x "]


def test_the_model_state_is_its_last_window_bytes(identifiers) -> None:
    """For every first byte a and every v of WINDOW bytes, walk(a v) == walk(v): the walk forgets older bytes."""
    windowed, _ = identifiers
    moves, rows = windowed._moves, windowed._row_offsets
    every = np.arange(256)
    longer, shorter = moves[rows[0] + every], np.zeros(256, dtype=np.uint32)  # (walk(a v), walk(v)), v empty
    for _ in range(WINDOW):
        differ = longer != shorter
        pairs = np.unique(np.stack([longer[differ], shorter[differ]], axis=1), axis=0)
        longer = moves[rows[pairs[:, 0]][:, None] + every].ravel()
        shorter = moves[rows[pairs[:, 1]][:, None] + every].ravel()
    assert np.array_equal(longer, shorter)


def test_features_scores_and_languages_are_py3langids(identifiers) -> None:
    windowed, stock = identifiers
    for text in _texts():
        data = stock._encode(text)
        counted = visit_counts(stock.tk_nextmove, stock._rowbase, stock.tk_output, data) or {}
        assert list(windowed.feature_counts(data).items()) == list(counted.items()), text[:40]
        assert np.array_equal(windowed._decide(text), stock._decide(text)), text[:40]
        assert windowed.classify(text) == stock.classify(text), text[:40]


def test_a_mixed_folder_stages_the_languages_py3langid_gives(store: Store, identifiers) -> None:
    _, stock = identifiers
    docs = [
        Document(f"{p.parent.name}/{p.name}", p.read_text(encoding="utf-8"))
        for p in sorted(DATA.glob("*/*.md"))
    ]
    docs.append(Document("numbers.md", "12 345 -- ()"))
    spec = make_spec(name="mixed-languages")
    store.documents.sync(spec.collection, docs, [])
    stage_chunks(store, spec, chunker=ParagraphChunker(spec.config.config_hash, random_unit_vector_for()))
    with store.connection() as conn:
        staged = dict(
            conn.execute(
                "SELECT DISTINCT doc_id, coalesce(metadata->>%s, '') FROM staged_chunks WHERE index_name = %s",
                (METADATA_KEY, spec.name),
            ).fetchall()
        )
    expected = {doc.id: stock.classify(doc.text[:SAMPLE_CHARS])[0] for doc in docs}
    expected["numbers.md"] = ""
    assert staged == expected
    assert len(set(staged.values())) >= 8
