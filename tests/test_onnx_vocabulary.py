"""The ONNX export through a small-vocabulary copy: the same files as exporting the whole model."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from chunkyard.chunking.models import DEFAULT_MODEL, resolve_model_path
from chunkyard.retrieval.embedders.onnx_export import ONNX_FP32_FILE, ONNX_INT8_FILE, export_in_children
from chunkyard.retrieval.embedders.onnx_vocabulary import (
    SMALL_VOCABULARY,
    WEIGHTS_FILE,
    WORD_EMBEDDINGS,
    small_vocabulary_copy,
    splice_word_embeddings,
)

# the export as it was made before the small-vocabulary copy: sentence-transformers over the whole
# model, then the same quantiser step (`onnx_export.quantize_int8`) on its fp32 file
WHOLE_EXPORT = """
import sys
from pathlib import Path
from sentence_transformers import SentenceTransformer
from chunkyard.retrieval.embedders.onnx_export import quantize_int8
SentenceTransformer(sys.argv[1], device="cpu", backend="onnx", local_files_only=True).save_pretrained(sys.argv[2])
quantize_int8(Path(sys.argv[2]))
"""


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_the_small_copy_keeps_the_matrix_extremes_and_every_other_weight(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    source = Path(resolve_model_path(DEFAULT_MODEL))
    small = small_vocabulary_copy(source, tmp_path)
    assert small is not None
    full, copied = load_file(source / WEIGHTS_FILE), load_file(small / WEIGHTS_FILE)
    rows = copied[WORD_EMBEDDINGS]
    assert SMALL_VOCABULARY <= len(rows) <= SMALL_VOCABULARY + 2 < len(full[WORD_EMBEDDINGS])
    assert rows.min() == full[WORD_EMBEDDINGS].min() and rows.max() == full[WORD_EMBEDDINGS].max()
    np.testing.assert_array_equal(rows[:SMALL_VOCABULARY], full[WORD_EMBEDDINGS][:SMALL_VOCABULARY])
    assert all(np.array_equal(full[name], copied[name]) for name in full if name != WORD_EMBEDDINGS)
    assert json.loads((small / "config.json").read_text(encoding="utf-8"))["vocab_size"] == len(rows)
    assert (small / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()


def test_a_folder_without_a_safetensors_matrix_is_exported_whole(tmp_path: Path) -> None:
    source = tmp_path / "model"
    source.mkdir()
    (source / "config.json").write_text("{}", encoding="utf-8")
    assert small_vocabulary_copy(source, tmp_path) is None


def test_the_spliced_export_is_byte_for_byte_the_whole_models(tmp_path: Path) -> None:
    """all-MiniLM-L6-v2 (30,522 rows) exported both ways: every file of the folder the same, both
    ONNX files included; splicing again changes nothing."""
    source = resolve_model_path(DEFAULT_MODEL)
    whole, spliced = tmp_path / "whole", tmp_path / "spliced"
    subprocess.run([sys.executable, "-c", WHOLE_EXPORT, source, str(whole)], check=True, capture_output=True)
    spliced.mkdir()
    export_in_children(source, spliced, "cpu")
    assert _digests(spliced) == _digests(whole)
    assert not splice_word_embeddings(Path(source), spliced / ONNX_FP32_FILE, spliced / ONNX_INT8_FILE)
