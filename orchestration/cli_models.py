"""`chunkyard models build/list`: make the per-machine model cache ready ahead of the first index."""

from __future__ import annotations

import argparse
import time

from chunkyard.chunking.models import BUILT_MODELS, DEFAULT_MODEL


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`models build|list` under the command's subparsers."""
    models = sub.add_parser("models", help="the per-machine model cache: build, list", parents=[common])
    actions = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build",
        help="build models and their ONNX exports into the cache (once per machine; make install runs it)",
        parents=[common],
    )
    build.add_argument(
        "names",
        nargs="*",
        metavar="MODEL",
        help=f"default: {', '.join([DEFAULT_MODEL, *BUILT_MODELS])}, and the o200k_base encoding",
    )
    actions.add_parser("list", help="what the cache holds, and where", parents=[common])


def cmd_models(args: argparse.Namespace) -> int:
    from chunkyard.chunking.model_cache import READY, model_cache_dir

    if args.models_command == "list":
        root = model_cache_dir()
        print(f"model cache: {root} (CHUNKYARD_MODEL_DIR overrides)")
        for folder in sorted(p for p in root.glob("**/*") if (p / READY).is_file()):
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            print(f"  {folder.relative_to(root)}  {size / 1e6:.0f} MB")
        from chunkyard.chunking.llm_encodings import O200K, rank_file

        print(f"  o200k_base encoding: {rank_file(O200K) or 'absent (chunkyard models build)'}")
        from chunkyard.retrieval.settings.options import LLM_TOKENIZERS
        from chunkyard.retrieval.settings.project import SettingsError, llm_tokenizer_files

        try:  # the project's own, named in its chunkyard.yaml (`llm_tokenizers:`)
            for name, path in llm_tokenizer_files(reserved=LLM_TOKENIZERS).items():
                print(f"  llm tokenizer {name}: {path}")
        except SettingsError as exc:
            print(f"  llm tokenizers: {exc}")
        return 0
    from chunkyard.chunking.llm_encodings import SOURCE_WHEEL, SOURCES_DIR, install_o200k
    from chunkyard.retrieval.embedders.embedder import load_embedder

    if not args.names:
        found = install_o200k()
        print(
            f"o200k_base: {found}"
            if found
            else f"o200k_base: skipped, no {SOURCE_WHEEL} in {SOURCES_DIR} (see requirements/llm_encodings.txt)"
        )
    for name in args.names or [DEFAULT_MODEL, *BUILT_MODELS]:
        started = time.perf_counter()
        embedder = load_embedder(name, backend="onnx", quantize="int8")  # builds the model, then fp32 + int8
        print(
            f"{name}: ready in {time.perf_counter() - started:.1f} s "
            f"({embedder.export_dir}, dim {embedder.dim}, max {embedder.max_seq_length} tokens)"
        )
    return 0
