"""Embedder: the real local all-MiniLM-L6-v2 (torch backend), sentence and token vectors."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from chunkyard.chunking.model_cache import READY, model_cache_dir
from chunkyard.chunking.models import DEFAULT_MODEL, resolve_model_path
from chunkyard.retrieval.embedders.base import EmbedderConfigError
from chunkyard.retrieval.embedders.embedder import load_embedder
from chunkyard.retrieval.embedders.onnx_backend import OnnxEmbedder, onnx_cache_dir
from chunkyard.retrieval.embedders.torch_backend import TorchEmbedder


def test_embed_returns_normalised_float32_vectors(embedder) -> None:
    vectors = embedder.embed(["The cat sat on the mat.", "Postgres stores vectors.", ""])
    assert vectors.shape == (3, embedder.dim) == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    again = embedder.embed(["Postgres stores vectors."])
    np.testing.assert_allclose(again[0], vectors[1], atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError, match="list"):
        embedder.embed("not a list")  # type: ignore[arg-type]


def test_embeddings_rank_a_paraphrase_above_an_unrelated_text(embedder) -> None:
    query, paraphrase, unrelated = embedder.embed(
        ["a cat sleeping on a carpet", "The feline rested upon the rug.", "Interest rates rose sharply."]
    )
    assert query @ paraphrase > query @ unrelated + 0.2


def test_embed_tokens_gives_spans_and_contextual_vectors(embedder) -> None:
    text = "Late chunking pools token vectors, naïvely."
    spans, vectors = embedder.embed_tokens(text)
    assert len(spans) == len(vectors) and vectors.shape[1] == 384
    pieces = [text[s:e] for s, e in spans]
    assert pieces[0] == "Late" and "".join(pieces) == text.replace(" ", "")
    assert all(0 <= s < e <= len(text) for s, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    # the same word in another context gets another vector (contextual, not a lookup table)
    _, other = embedder.embed_tokens("Late trains annoy commuters.")
    assert not np.allclose(vectors[0], other[0])


def test_embed_tokens_truncates_to_the_model_limit(embedder) -> None:
    text = "word " * 1000
    spans, vectors = embedder.embed_tokens(text)
    assert len(spans) == embedder.max_seq_length - 2  # [CLS] and [SEP] dropped
    assert spans[-1][1] < len(text)


def test_model_id_tokenizer_and_limits(embedder) -> None:
    assert embedder.model_id == "all-MiniLM-L6-v2"
    assert embedder.max_seq_length == 256
    assert embedder.tokenizer.count("hello world") == 4  # [CLS] hello world [SEP]


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(EmbedderConfigError, match="backend"):
        load_embedder(backend="tensorflow")
    with pytest.raises(EmbedderConfigError, match="quantize"):
        load_embedder(quantize="int4")
    with pytest.raises(EmbedderConfigError, match="onnx"):
        load_embedder(quantize="int8")
    with pytest.raises(ValueError, match="not available locally"):
        load_embedder("no-such-model")


def test_onnx_backends_are_exported_offline_and_match_torch(embedder, tmp_path, monkeypatch) -> None:
    """ONNX fp32 gives the torch vectors; int8 stays close (cosine > 0.97); both exported into the
    per-machine model cache, never into the project's CHUNKYARD_HOME."""
    monkeypatch.setenv("CHUNKYARD_HOME", str(tmp_path))
    texts = ["Postgres stores vectors with pgvector.", "Glaciers carve valleys as they move downhill. " * 8]
    reference = embedder.embed(texts)
    onnx = load_embedder(backend="onnx")
    assert isinstance(onnx, OnnxEmbedder) and isinstance(embedder, TorchEmbedder)  # one class per backend
    assert onnx.model_id == "all-MiniLM-L6-v2@onnx" and onnx.dim == 384
    np.testing.assert_allclose(onnx.embed(texts), reference, atol=1e-4)
    export = onnx.export_dir
    assert export.parent == model_cache_dir() / "onnx" and (export / READY).is_file()
    assert (export / "onnx" / "model.onnx").is_file() and not list(tmp_path.rglob("*.onnx"))
    spans, vectors = onnx.embed_tokens("hello world")
    assert spans == [(0, 5), (6, 11)] and vectors.shape == (2, 384)
    int8 = load_embedder(backend="onnx", quantize="int8")
    assert int8.model_id == "all-MiniLM-L6-v2@onnx-int8" and int8.export_dir == export
    cosines = (int8.embed(texts) * reference).sum(axis=1)
    assert cosines.min() > 0.97


def test_a_corrupt_onnx_cache_is_rebuilt_with_a_warning(tmp_path, monkeypatch) -> None:
    """A truncated export (disk full mid-write, say) is repaired instead of failing every later run;
    it starts from a copy of the machine's export, so only the repair exports."""
    reference = load_embedder(backend="onnx", quantize="int8").embed(["Repair the cache."])
    export = onnx_cache_dir(resolve_model_path(DEFAULT_MODEL), DEFAULT_MODEL)
    monkeypatch.setenv("CHUNKYARD_MODEL_DIR", str(tmp_path))
    copy = onnx_cache_dir(resolve_model_path(DEFAULT_MODEL), DEFAULT_MODEL)
    shutil.copytree(export, copy)
    (int8_file,) = (copy / "onnx").glob("model_*int8_avx2.onnx")
    int8_file.write_bytes(int8_file.read_bytes()[:1000])  # truncated
    with pytest.warns(UserWarning, match="unusable"):
        repaired = load_embedder(backend="onnx", quantize="int8")
    assert repaired.export_dir == copy and (copy / READY).is_file()
    assert sorted(p.name for p in tmp_path.joinpath("onnx").iterdir()) == [copy.name, f"{copy.name}.lock"]
    np.testing.assert_allclose(repaired.embed(["Repair the cache."]), reference, atol=1e-6)


def test_the_onnx_backend_matches_sentence_transformers_onnx_without_importing_torch() -> None:
    """onnxruntime alone (retrieval.embedders.onnx_encoder) gives sentence-transformers' ONNX vectors, batch for
    batch: the int8 model's vectors depend on their batch neighbours, so the batching must match too.
    And loading it from a ready export imports neither torch nor sentence-transformers."""
    import subprocess
    import sys

    from sentence_transformers import SentenceTransformer

    texts = [
        "Postgres stores vectors with pgvector.",
        "Gletscher formen Täler, während sie langsam bergab fließen. " * 30,  # past 256 word pieces
        "東京の地下鉄は朝が一番混む。",
        "",
        "k",
        "Rust's borrow checker rejects two mutable references.",
    ] * 3
    for quantize, file_glob in ((None, "model.onnx"), ("int8", "model_*int8_avx2.onnx")):
        ours = load_embedder(backend="onnx", quantize=quantize, batch_size=4)
        (model_file,) = (ours.export_dir / "onnx").glob(file_glob)
        theirs = SentenceTransformer(
            str(ours.export_dir),
            backend="onnx",
            local_files_only=True,
            model_kwargs={"file_name": f"onnx/{model_file.name}"},
        )
        expected = theirs.encode(texts, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
        np.testing.assert_allclose(ours.embed(texts), expected, atol=1e-5)
        tokens = theirs.encode(texts, batch_size=4, output_value="token_embeddings", convert_to_numpy=False)
        for mine, reference in zip(ours.token_embeddings(texts), tokens, strict=True):
            np.testing.assert_allclose(mine, reference.numpy(), atol=1e-5)
        assert ours.max_seq_length == theirs.max_seq_length == 256
    probe = (
        "import sys; from chunkyard.retrieval.embedders.embedder import load_embedder; "
        "e = load_embedder(backend='onnx', quantize='int8'); e.embed(['x']); e.embed_tokens('x'); "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_length_groups_keep_each_model_call_within_the_token_budget() -> None:
    """Positions in sentence-transformers' order (longest by characters first), each exactly once;
    a group holds at most batch_size texts and texts x its longest <= the budget, unless one text
    alone exceeds it; within the budget the groups are plain batches of batch_size."""
    from chunkyard.retrieval.embedders.onnx_encoder import length_groups

    rng = np.random.default_rng(7)
    lengths = [int(n) for n in rng.integers(3, 257, size=200)]
    texts = ["x" * n for n in lengths]  # characters order them as tokens do here
    for batch_size, budget in ((32, 2048), (8, 100), (4, 10**9), (1, 2048)):
        groups = length_groups(texts, lengths, batch_size, budget)
        flat = np.concatenate(groups)
        assert sorted(flat.tolist()) == list(range(len(texts)))
        assert flat.tolist() == np.argsort([-len(t) for t in texts]).tolist()
        for group in groups:
            widest = max(lengths[i] for i in group)
            assert len(group) <= batch_size
            assert len(group) * widest <= budget or len(group) == 1
        if budget == 10**9:
            assert [len(g) for g in groups[:-1]] == [batch_size] * (len(groups) - 1)
    assert length_groups([], [], 32, 2048) == []


def test_budgeted_batches_give_the_vectors_of_one_text_at_a_time(embedder) -> None:
    """Cutting a call into token-budgeted model batches changes padding only: each vector is the
    text's own (torch, fp32), long and short texts mixed in one call."""
    texts = ["Gletscher formen Täler. " * 60, "short", "Postgres stores vectors with pgvector. " * 20] * 6
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts[:3]] * 6)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_concurrent_embed_calls_share_one_tokenizer_safely(embedder) -> None:
    """Searches embed from several threads at once: the length counting before the model calls must
    not race on the fast tokenizer (it raised "Already borrowed" and the service answered 500)."""
    from concurrent.futures import ThreadPoolExecutor

    texts = ["crash recovery in Postgres", "queue depth of a worker " * 40, "k"]
    expected = embedder.embed(texts)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: embedder.embed(texts), range(24)))
    for vectors in results:
        np.testing.assert_allclose(vectors, expected, atol=1e-5)
