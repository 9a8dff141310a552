"""A model's ONNX export (fp32, int8, then its word embeddings), each step a child process."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from chunkyard.retrieval.embedders.onnx_vocabulary import small_vocabulary_copy, splice_word_embeddings

ONNX_FP32_FILE = "onnx/model.onnx"
QUANTIZATION = "avx2"  # onnxruntime's dynamic int8 configuration for x86 CPUs (uint8 weights)
# sentence-transformers' name for it: model_{weights dtype}_{configuration}.onnx
ONNX_INT8_FILE = f"onnx/model_quint8_{QUANTIZATION}.onnx"
log = logging.getLogger("chunkyard.models")
# Measured on multilingual-e5-small (benchmarks/results/model_build_memory.md): in one process the
# export and the quantisation reached 5.0 GB, since Python does not hand the freed memory back, so each
# step has its own process and the build's peak is the largest step's. Exported and quantised whole,
# those steps peaked at 3.3 and 3.4 GB, mostly copies of the word-embedding matrix; they now run on a
# small-vocabulary copy of the model, and a third step splices the full matrix into both files
# (`retrieval.embedders.onnx_vocabulary`). The files are byte for byte those of sentence-transformers'
# export and `export_dynamic_quantized_onnx_model` (the same optimum quantiser, the same `avx2`
# configuration), sha256 compared.


class OnnxExportError(RuntimeError):
    """A child process of the export failed; the message ends with its last output lines."""


def export_fp32(model_path: str, staging: Path, device: str) -> None:
    """The sentence-transformers folder of `model_path` with its fp32 ONNX file, into `staging`: made
    from the model's small-vocabulary copy where it has one (`splice_word_embeddings` completes it)."""
    from chunkyard.chunking.model_cache import library_output_to_log

    with tempfile.TemporaryDirectory(prefix="chunkyard-export-") as scratch:
        small = small_vocabulary_copy(Path(model_path), Path(scratch))
        with library_output_to_log():
            from sentence_transformers import SentenceTransformer

            exported = SentenceTransformer(
                str(small or model_path), device=device, backend="onnx", local_files_only=True
            )
            if small is not None:  # the saved config.json is the model's own, not the copy's
                exported[0].auto_model.config.vocab_size = _vocab_size(Path(model_path))
            exported.save_pretrained(str(staging))


def _vocab_size(model_path: Path) -> int:
    return int(json.loads((model_path / "config.json").read_text(encoding="utf-8"))["vocab_size"])


def quantize_int8(staging: Path) -> None:
    """`onnx/model_quint8_avx2.onnx` next to the fp32 file, quantised from that file alone."""
    from chunkyard.chunking.model_cache import library_output_to_log

    with library_output_to_log():
        from optimum.onnxruntime import ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        fp32, int8 = staging / ONNX_FP32_FILE, staging / ONNX_INT8_FILE
        config = getattr(AutoQuantizationConfig, QUANTIZATION)(is_static=False)
        quantizer = ORTQuantizer.from_pretrained(fp32.parent, file_name=fp32.name)
        with tempfile.TemporaryDirectory(dir=staging) as scratch:  # the quantiser writes a config too
            # it names its file model_{file_suffix}.onnx
            quantizer.quantize(config, scratch, file_suffix=int8.stem.removeprefix("model_"))
            shutil.move(str(Path(scratch) / int8.name), str(int8))


def export_in_children(model_path: str, staging: Path, device: str) -> None:
    """fp32, int8, then the word embeddings into `staging`, each in a child process of this Python
    (OnnxExportError)."""
    steps = (
        ["fp32", model_path, str(staging), device],
        ["int8", str(staging)],
        ["splice", model_path, str(staging)],
    )
    for step in steps:
        done = subprocess.run(
            [sys.executable, "-m", "chunkyard.retrieval.embedders.onnx_export", *step],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in (done.stdout + done.stderr).splitlines():
            log.debug("onnx export %s: %s", step[0], line)
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise OnnxExportError(
                f"the {step[0]} ONNX export of {model_path} failed (exit {done.returncode}): {tail}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chunkyard.retrieval.embedders.onnx_export")
    steps = parser.add_subparsers(dest="step", required=True)
    fp32 = steps.add_parser("fp32", help="the fp32 export of a model folder into a staging folder")
    fp32.add_argument("model_path")
    fp32.add_argument("staging", type=Path)
    fp32.add_argument("device")
    int8 = steps.add_parser("int8", help="the int8 file quantised from a staging folder's fp32 file")
    int8.add_argument("staging", type=Path)
    splice = steps.add_parser("splice", help="the model's full word embeddings into both files")
    splice.add_argument("model_path", type=Path)
    splice.add_argument("staging", type=Path)
    args = parser.parse_args(argv)
    if args.step == "fp32":
        export_fp32(args.model_path, args.staging, args.device)
    elif args.step == "int8":
        quantize_int8(args.staging)
    else:
        splice_word_embeddings(args.model_path, args.staging / ONNX_FP32_FILE, args.staging / ONNX_INT8_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
