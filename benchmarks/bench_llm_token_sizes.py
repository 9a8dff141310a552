"""Chunk sizes in the embedding model's tokens against sizes in cl100k tokens, per language (issue 40).

multilingual-e5-small (ONNX int8), served mode, k=5, each set its own collection: the sets of
`bench_languages --retrieval` (tests/data/multilingual: 6 short documents x 12 questions in
en/es/id/uk/ar/hi/th; the public samples evaluation/datasets/*_sample.json; the demo set docs/).
Configs: `recursive-256-multilingual` as bundled (size in model tokens) and the same with
`tokenizer: cl100k` at each size given (`o200`: `tokenizer: o200k` at 200). Per set and config: hit@5,
MRR@5, cl100k and o200k tokens of the top 5, served recall within 1,024 tokens of either encoding (the
evaluation's budget recall, `llm_tokenizer`), the recall of a search trimmed to 512 and 1,024 cl100k
tokens (`trimmed_recall`), chunks, and the largest chunk in model tokens. Writes
`benchmarks/results/llm_token_sizes.json`.

    python -m benchmarks.bench_llm_token_sizes [SIZE ...]   # default: 200 256; m128: 128 model tokens
    BENCH_SETS="hi th iapp_thai_wiki_qa_test_sample" python -m benchmarks.bench_llm_token_sizes 200
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_languages import DATA, PUBLIC_SETS, RETRIEVAL_LANGUAGES

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results" / "llm_token_sizes.json"
BASE_CONFIG = "recursive-256-multilingual"
PAIRED = (
    "hit_at_5",
    "mrr_at_5",
    "budget_recall_1024",
    "trimmed_recall_1024",
)  # per question, for the paired differences


def _sets() -> list[tuple[str, list, list]]:
    """(label, documents, questions) for every set, or those named in BENCH_SETS."""
    from chunkyard.chunking.types import Document
    from chunkyard.evaluation.datasets.evalset import read_eval_set
    from chunkyard.evaluation.datasets.squad import load_squad

    from benchmarks.bench_embedder import load_demo_set

    wanted = set(os.environ.get("BENCH_SETS", "").split())
    sets = []
    for language in RETRIEVAL_LANGUAGES:
        if wanted and language not in wanted:
            continue
        documents = [
            Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))
        ]
        questions = read_eval_set(
            DATA / f"{language}_questions.jsonl", documents, on_missing="error"
        ).questions
        sets.append((language, documents, questions))
    for name, language in PUBLIC_SETS.items():
        if wanted and name not in wanted:
            continue
        data = load_squad(REPO_ROOT / "evaluation" / "datasets" / f"{name}.json", documents="articles")
        sets.append((f"{language} ({name})", data.documents, data.questions))
    if not wanted or "demo" in wanted:
        demo, _ = load_demo_set()
        if demo is not None:
            sets.append(("demo (en)", demo.documents, demo.questions))
    return sets


def measure(sizes: tuple[str, ...]) -> list[dict[str, object]]:
    """Each config x set: build the index, evaluate served at k=5."""
    from chunkyard.chunking.tokenizers import TiktokenTokenizer, get_tokenizer
    from chunkyard.evaluation.runner import SERVED_VARIANT, EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.settings.options import SearchOptions
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    base = load_index_configs()[BASE_CONFIG]
    configs = [("A model-256", base)]
    for size in sizes:  # "m128": a control, smaller in model tokens (every language shrinks alike)
        tokenizer = {"m": "model", "o": "o200k"}.get(size[0], "cl100k")
        number = int(size.lstrip("mo"))
        label = f"{'control model' if tokenizer == 'model' else f'B {tokenizer}'}-{number}"
        chunker = {**base.chunker, "size": number, "tokenizer": tokenizer}
        configs.append(
            (label, replace(base, name=f"recursive-{number}-{tokenizer}-multilingual", chunker=chunker))
        )
    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-llm-sizes-")))
    store.migrate()
    embedder = load_embedder(base.embedding_model, backend="onnx", quantize="int8", batch_size=32)
    searcher = Searcher(store, embedder)
    cl100k = TiktokenTokenizer()
    model_tokens = get_tokenizer("model", base.embedding_model)
    rows: list[dict[str, object]] = []
    for label, documents, questions in _sets():
        for variant, config in configs:
            spec = IndexSpec(f"sizes-{len(rows)}", config)
            started = time.perf_counter()
            store.documents.sync(spec.collection, documents, [])
            build_index(store, spec, embedder)
            built = time.perf_counter() - started
            info = store.indexes.info(spec.name)
            report = evaluate_index(
                searcher,
                spec,
                questions,
                EvaluationRequest(variants=(SERVED_VARIANT,), k=5, n_resamples=200, budgets=(512, 1024)),
                store=store,
            )
            served = report.metrics[SERVED_VARIANT]
            in_o200k = evaluate_index(  # the same served results, their budget counted in GPT-4o's encoding
                searcher,
                spec,
                questions,
                EvaluationRequest(
                    variants=(SERVED_VARIANT,),
                    k=5,
                    n_resamples=200,
                    options=SearchOptions(llm_tokenizer="o200k_base"),
                ),
                store=store,
            ).metrics[SERVED_VARIANT]
            served_summary = report.summaries[SERVED_VARIANT]
            with store.connection() as conn:
                texts = [
                    r[0]
                    for r in conn.execute("SELECT text FROM chunks WHERE index_name = %s", (str(spec.name),))
                ]
            rows.append(
                {
                    "set": label,
                    "config": variant,
                    "questions": len(questions),
                    "chunks": info["chunk_count"],
                    "hit_at_5": served["hit_at_5"],
                    "mrr_at_5": served["mrr_at_5"],
                    "context_tokens_at_5": served["context_tokens_at_5"],
                    "budget_recall_1024": served["budget_recall_1024"],
                    "trimmed_recall_1024": served["trimmed_recall_1024"],
                    "trimmed_recall_512": served["trimmed_recall_512"],
                    "budget_recall_512": served["budget_recall_512"],
                    "context_tokens_at_5_o200k": in_o200k["context_tokens_at_5"],
                    "budget_recall_1024_o200k": in_o200k["budget_recall_1024"],
                    "max_chunk_cl100k": max((cl100k.count(t) for t in texts), default=None),
                    "max_chunk_model": max((model_tokens.count(t) for t in texts), default=None),
                    "build_s": round(built, 1),
                    "per_question": {
                        qid: [round(v[name], 4) for name in PAIRED]
                        for qid, v in served_summary.per_question.items()
                    },
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def paired(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each B row against A on the same set: per-question differences, 95% bootstrap CI, questions better/worse."""
    import numpy as np
    from chunkyard.evaluation.estimates import bootstrap_ci

    base = {r["set"]: r for r in rows if str(r["config"]).startswith("A")}
    out = []
    for row in rows:
        a = base[row["set"]]
        if row is a:
            continue
        ids = sorted(a["per_question"])
        entry: dict[str, object] = {"set": row["set"], "config": row["config"], "questions": len(ids)}
        for i, name in enumerate(PAIRED):
            diff = np.array([row["per_question"][q][i] - a["per_question"][q][i] for q in ids])
            est = bootstrap_ci(diff, n_resamples=2000)
            entry[name] = {
                "delta": round(100 * est.mean, 1),
                "ci": [round(100 * est.low, 1), round(100 * est.high, 1)],
                "better": int((diff > 1e-9).sum()),
                "worse": int((diff < -1e-9).sum()),
            }
        out.append(entry)
    return out


def main() -> None:
    sizes = tuple(s for s in sys.argv[1:] if s.lstrip("mo").isdigit()) or ("200", "256")
    rows = measure(sizes)
    differences = paired(rows)
    RESULTS.write_text(json.dumps({"rows": rows, "paired": differences}, indent=1) + "\n", encoding="utf-8")
    print(
        "| set | config | questions | chunks | hit@5 | MRR@5 | top-5 cl100k | recall@1024 cl100k "
        "| top-5 o200k | recall@1024 o200k | trimmed@1024 | recall@512 | trimmed@512 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['config']} | {r['questions']} | {r['chunks']} | {100 * r['hit_at_5']:.1f} | "
            f"{100 * r['mrr_at_5']:.1f} | {r['context_tokens_at_5']:.0f} | {100 * r['budget_recall_1024']:.1f} "
            f"| {r['context_tokens_at_5_o200k']:.0f} | {100 * r['budget_recall_1024_o200k']:.1f} "
            f"| {100 * r['trimmed_recall_1024']:.1f} | {100 * r['budget_recall_512']:.1f} "
            f"| {100 * r['trimmed_recall_512']:.1f} |"
        )
    print(
        "\n| set | config | Δhit@5 (better/worse) | ΔMRR@5 (better/worse) | Δrecall@1024 (better/worse) "
        "| Δtrimmed@1024 (better/worse) |"
    )
    print("|---|---|---|---|---|---|")
    for d in differences:
        cells = [
            f"{d[m]['delta']:+.1f} [{d[m]['ci'][0]:+.1f}, {d[m]['ci'][1]:+.1f}] ({d[m]['better']}/{d[m]['worse']})"
            for m in PAIRED
        ]
        print(f"| {d['set']} | {d['config']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
