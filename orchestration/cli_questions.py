"""`chunkyard questions generate`: a collection's eval set, written by an LLM from its own chunks."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from chunkyard.orchestration.cli_errors import RuntimeFailure, UsageError

MODEL_ENV = "CHUNKYARD_LLM_MODEL"
LLM_HINT = (
    "--llm takes an OpenAI-compatible server (POST <URL>/v1/chat/completions, or the full "
    ".../chat/completions URL); a key goes in CHUNKYARD_LLM_API_KEY"
)


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`questions generate` under the command's subparsers."""
    questions = sub.add_parser("questions", help="eval-set questions from a collection", parents=[common])
    actions = questions.add_subparsers(dest="questions_command", required=True, metavar="ACTION")
    generate = actions.add_parser(
        "generate",
        help="ask an LLM for questions quoted from the collection's chunks; write its eval-set JSONL",
        parents=[common],
    )
    generate.add_argument("--collection", required=True, help="collection of chunkyard.yaml")
    generate.add_argument("--llm", required=True, metavar="URL", help="OpenAI-compatible endpoint")
    generate.add_argument(
        "--model",
        default=None,
        help=f"the model the endpoint serves, e.g. llama3.1 for Ollama (default ${MODEL_ENV}; no guess)",
    )
    generate.add_argument("--n", type=int, default=50, help="questions wanted (default 50)")
    generate.add_argument(
        "--output", default=None, metavar="PATH", help="default evals/<collection>.generated.jsonl"
    )
    generate.add_argument("--index", default=None, metavar="CONFIG", help="chunks of this index config")
    generate.add_argument("--seed", type=int, default=0, help="which chunks are asked about")
    generate.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    generate.add_argument("--force", action="store_true", help="overwrite an existing output file")
    generate.add_argument(
        "--set-eval", action="store_true", help="make it the collection's eval_set in chunkyard.yaml"
    )


def cmd_questions(args: argparse.Namespace) -> int:
    from chunkyard.chunking import build_chunker
    from chunkyard.evaluation.generate import ChatClient, LLMEndpointError, generate_questions, write_eval_set
    from chunkyard.orchestration.project_file import set_eval_set
    from chunkyard.pipeline.documents import load_collection_documents
    from chunkyard.retrieval.settings.config import load_collections, load_index_configs
    from chunkyard.retrieval.settings.names import DEFAULT_CONFIG
    from chunkyard.retrieval.settings.project import PROJECT_FILE, project_root

    root = project_root()
    collections = load_collections()
    collection = collections.get(args.collection)
    if collection is None:
        raise UsageError(
            f"--collection {args.collection}: not in {root / PROJECT_FILE}; known: "
            f"{', '.join(sorted(collections)) or 'none'}"
        )
    if args.n < 1:
        raise UsageError(f"--n: expected a positive number of questions, got {args.n}")
    model = args.model or os.environ.get(MODEL_ENV)
    if not model:  # a local endpoint serves its own models: no default is right for all of them
        raise UsageError(f"--model: name the model {args.llm} serves (e.g. llama3.1), or set {MODEL_ENV}")
    output = Path(args.output) if args.output else Path("evals") / f"{collection.name}.generated.jsonl"
    target = output if output.is_absolute() else root / output
    if target.exists() and not args.force:
        raise UsageError(f"--output {target}: exists already; pass --force to overwrite it")
    configs = load_index_configs()
    config_name = args.index or (collection.indexes[0] if collection.indexes else DEFAULT_CONFIG)
    if config_name not in configs:
        raise UsageError(f"--index {config_name}: unknown index config; known: {', '.join(sorted(configs))}")
    try:
        client = ChatClient(args.llm, model, timeout=args.timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    # The folders as the documents step reads them (same ids as the store's), indexed or not.
    documents = load_collection_documents(collection).documents
    if not documents:
        raise UsageError(f"collection {collection.name!r} has no readable documents")
    config = configs[config_name]
    chunker = build_chunker(
        {"model": config.embedding_model, **config.chunker}, config_key=config.config_hash
    )
    chunks = [c for chunk_list in chunker.chunk_batch(documents) for c in chunk_list]
    print(
        f"Asking {client.url} ({client.model}) for {args.n} question(s) about {collection.name} "
        f"({len(documents)} documents, {len(chunks)} chunks of {config_name})",
        flush=True,
    )
    try:
        result = generate_questions(documents, chunks, client, n=args.n, seed=args.seed)
    except LLMEndpointError as exc:
        raise RuntimeFailure(str(exc), LLM_HINT) from exc
    finally:
        client.close()
    print(result.summary(), flush=True)
    if not result.records:
        raise RuntimeFailure(
            f"no question kept from {client.url}: {result.summary()}",
            "try another --model, more --n, or --seed for other chunks",
        )
    write_eval_set(result.records, target)
    written = str(target.relative_to(root)) if target.is_relative_to(root) else str(target)
    print(f"Wrote {len(result.records)} question(s) to {target}", flush=True)
    if args.set_eval:
        set_eval_set(root, collection.name, written)
        print(f"Set collections.{collection.name}.eval_set: {written} in {root / PROJECT_FILE}", flush=True)
        print(f"Next: chunkyard index {collection.name}  (the leaderboard evaluates on it)", flush=True)
    else:
        print(f"Use it: set `eval_set: {written}` under collections.{collection.name} (or pass --set-eval)")
    return 0
