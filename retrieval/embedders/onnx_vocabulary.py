"""The word-embedding matrix kept out of the ONNX export and quantiser, then spliced into both files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto, TensorProto

# multilingual-e5-small has 118M weights, 96M of them its word embeddings (250,037 x 384): torch's ONNX
# exporter and onnxruntime's quantiser each held that matrix several times over (3.3 and 3.4 GB peaks,
# benchmarks/results/model_build_memory.md). So both run on a copy of the model folder with a few
# hundred rows of it, and the full matrix is written into both files afterwards. Nothing else in either
# graph depends on the vocabulary's size: the files come out byte for byte those of a whole export.
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
WEIGHTS_FILE = "model.safetensors"
SMALL_VOCABULARY = 256  # rows the exporter sees (plus the two holding the matrix's extremes)
QUANTIZED_SUFFIXES = ("_quantized", "_scale", "_zero_point")  # onnxruntime's initializer names


def word_embeddings_shape(source: Path) -> tuple[int, int] | None:
    """The word-embedding matrix's shape in the model folder's safetensors file, None without one."""
    from safetensors import safe_open

    if not (source / WEIGHTS_FILE).is_file() or not (source / "config.json").is_file():
        return None
    with safe_open(str(source / WEIGHTS_FILE), "np") as weights:
        names = weights.keys()  # a safetensors file is no mapping: no `in` of its own
        if WORD_EMBEDDINGS not in names:
            return None
        rows, width = weights.get_slice(WORD_EMBEDDINGS).get_shape()
    return int(rows), int(width)


def small_vocabulary_copy(source: Path, scratch: Path) -> Path | None:
    """A copy of the model folder in `scratch` with SMALL_VOCABULARY rows of word embeddings (and the
    rows holding the matrix's minimum and maximum); None where the folder has no such matrix or no
    bigger vocabulary, so the model is exported as it is."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    shape = word_embeddings_shape(source)
    if shape is None or shape[0] <= SMALL_VOCABULARY + 2:
        return None
    small = scratch / "small-vocabulary"
    shutil.copytree(source, small, ignore=lambda folder, _: [WEIGHTS_FILE] if Path(folder) == source else [])
    state: dict[str, np.ndarray] = {}
    with safe_open(str(source / WEIGHTS_FILE), "np") as weights:
        metadata = weights.metadata()
        names = weights.keys()
        for name in names:
            tensor = weights.get_tensor(name)
            if name == WORD_EMBEDDINGS:
                extremes = {int(np.argmin(tensor)) // shape[1], int(np.argmax(tensor)) // shape[1]}
                tensor = np.ascontiguousarray(tensor[sorted(set(range(SMALL_VOCABULARY)) | extremes)])
            state[name] = tensor
    save_file(state, str(small / WEIGHTS_FILE), metadata=metadata)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config["vocab_size"] = len(state[WORD_EMBEDDINGS])
    (small / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return small


def _initializers(model: ModelProto) -> dict[str, TensorProto]:
    return {tensor.name: tensor for tensor in model.graph.initializer}


def splice_word_embeddings(source: Path, fp32: Path, int8: Path) -> bool:
    """The source folder's full word-embedding matrix written into the fp32 and int8 ONNX files made
    from its small-vocabulary copy; False (nothing written) where they already hold it.

    onnx's `numpy_helper` writes the matrix into the fp32 file as it is, and into the int8 file
    quantised by onnxruntime's own `quantize_nparray` with the scale and zero point the quantiser
    stored. Those come from the matrix's smallest and largest values (per tensor, asymmetric uint8:
    what the `avx2` configuration gives a Gather's data), and the small copy kept the rows holding
    both, so they are the full matrix's.
    """
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization.quant_utils import quantize_nparray
    from safetensors import safe_open

    shape = word_embeddings_shape(source)
    quantized = onnx.load(str(int8))
    tensors = _initializers(quantized)
    names = [WORD_EMBEDDINGS + suffix for suffix in QUANTIZED_SUFFIXES]
    if shape is None:
        return False
    if any(name not in tensors for name in names):
        raise ValueError(f"{int8}: no quantised {WORD_EMBEDDINGS} to splice the full matrix into")
    if tuple(tensors[names[0]].dims) == shape:
        return False
    with safe_open(str(source / WEIGHTS_FILE), "np") as weights:
        matrix = weights.get_tensor(WORD_EMBEDDINGS)
    scale, zero_point = (numpy_helper.to_array(tensors[name]) for name in names[1:])
    small = numpy_helper.to_array(tensors[names[0]])
    values = quantize_nparray(onnx.TensorProto.UINT8, matrix, scale, zero_point)
    if values.dtype != small.dtype or not np.array_equal(values[:SMALL_VOCABULARY], small[:SMALL_VOCABULARY]):
        raise ValueError(f"{int8}: the full matrix at the stored scale and zero point is not the quantiser's")
    tensors[names[0]].CopyFrom(numpy_helper.from_array(values, names[0]))
    del values, tensors
    onnx.save(quantized, str(int8))
    del quantized
    model = onnx.load(str(fp32))
    if WORD_EMBEDDINGS not in _initializers(model):
        raise ValueError(f"{fp32}: no {WORD_EMBEDDINGS} to splice the full matrix into")
    _initializers(model)[WORD_EMBEDDINGS].CopyFrom(numpy_helper.from_array(matrix, WORD_EMBEDDINGS))
    del matrix
    onnx.save(model, str(fp32))
    return True
