"""A model's ONNX export (fp32, then int8) made in two child processes, so the build's peak memory is
the larger step's, not their sum: `export_in_children`.

Measured on multilingual-e5-small (benchmarks/results/first_run.md): the fp32 export (torch and its
ONNX exporter) peaks at 3.2 GB and the int8 quantisation at 3.4 GB when it reads the fp32 file itself
(4.1 GB when it first opens the model in an onnxruntime session, as sentence-transformers' helper
does); in one process the two reached 5.0 GB, since Python does not hand the freed memory back. The
files are byte for byte those of sentence-transformers' `export_dynamic_quantized_onnx_model`: the same
optimum quantiser with the same `avx2` configuration, on the same fp32 file.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ONNX_FP32_FILE = "onnx/model.onnx"
QUANTIZATION = "avx2"  # onnxruntime's dynamic int8 configuration for x86 CPUs (uint8 weights)
log = logging.getLogger("chunkyard.models")


class OnnxExportError(RuntimeError):
    """A child process of the export failed; the message ends with its last output lines."""


def export_fp32(model_path: str, staging: Path, device: str) -> None:
    """The sentence-transformers folder of `model_path` with its fp32 ONNX file, into `staging`."""
    from chunkyard.chunking.model_cache import library_output_to_log

    with library_output_to_log():
        from sentence_transformers import SentenceTransformer

        exported = SentenceTransformer(model_path, device=device, backend="onnx", local_files_only=True)
        exported.save_pretrained(str(staging))


def quantize_int8(staging: Path) -> None:
    """`onnx/model_quint8_avx2.onnx` next to the fp32 file, quantised from that file alone."""
    from chunkyard.chunking.model_cache import library_output_to_log

    with library_output_to_log():
        from optimum.onnxruntime import ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        fp32 = staging / ONNX_FP32_FILE
        config = getattr(AutoQuantizationConfig, QUANTIZATION)(is_static=False)
        suffix = f"{config.weights_dtype.name.lower()}_{QUANTIZATION}"  # sentence-transformers' file name
        quantizer = ORTQuantizer.from_pretrained(fp32.parent, file_name=fp32.name)
        with tempfile.TemporaryDirectory(dir=staging) as scratch:  # the quantiser writes a config too
            quantizer.quantize(config, scratch, file_suffix=suffix)
            name = f"model_{suffix}.onnx"
            shutil.move(str(Path(scratch) / name), str(fp32.parent / name))


def export_in_children(model_path: str, staging: Path, device: str) -> None:
    """fp32 then int8 into `staging`, each in a child process of this Python (OnnxExportError)."""
    for step in (["fp32", model_path, str(staging), device], ["int8", str(staging)]):
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
    args = parser.parse_args(argv)
    if args.step == "fp32":
        export_fp32(args.model_path, args.staging, args.device)
    else:
        quantize_int8(args.staging)
    return 0


if __name__ == "__main__":
    sys.exit(main())
