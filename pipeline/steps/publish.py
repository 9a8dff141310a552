"""Step `publish`: publish everything staged atomically, then check what readers now see."""

from __future__ import annotations

from chunkyard.pipeline import checks
from chunkyard.pipeline.checks import DeclaredCheck
from chunkyard.pipeline.step_report import StepReport, StepRun
from chunkyard.retrieval.embedders.embedder import Embedder
from chunkyard.retrieval.indexing.lag import index_lag
from chunkyard.retrieval.indexing.publish import publish
from chunkyard.retrieval.settings.config import IndexSpec
from chunkyard.retrieval.store import Store, integrity

# Bump when this module or `retrieval.indexing.publish` (with `swap`, `staging`, `hnsw`) changes what
# a publish writes.
CODE_VERSION = "1"

CHECKS = (
    DeclaredCheck("published_spans_match", "Every published chunk's span matches its document."),
    DeclaredCheck("published_vectors", "Every published chunk has one vector with the model's dimensions."),
    DeclaredCheck("bm25_count_matches_chunks", "BM25 document count equals the chunk count."),
)


def step_publish(store: Store, spec: IndexSpec, embedder: Embedder | None, run: StepRun) -> StepReport:
    """Publish run `run.owner`'s staging; checks: published spans, one vector per chunk, BM25 count and
    length equal the chunks'.

    The span check reads the documents this publish wrote; the rest of the index is covered by their
    unchanged hashes (see `checks.check_spans`), so a one-document update does not re-read them all.
    """
    written = integrity.staged_documents(store, spec.name).chunked
    published = publish(store, spec, owner=run.owner, progress=run.progress)  # progress in phases
    scope = None if published.full_rebuild else written  # the rest was checked when published
    info = store.indexes.info(spec.name) or {}
    dim = int(info.get("dim") or 0)  # 0: nothing published yet, any single dimension passes
    # what the index is still behind after this publish (changes that arrived while it ran)
    behind = index_lag(store, spec.name, spec.collection).as_dict()
    lag = {"documents_behind": behind["documents_behind"]}
    lag["oldest_unindexed_change"] = behind["oldest_unindexed_change"] or "-"
    bm25 = (info.get("config") or {}).get("bm25") or {}
    analysis = {
        "analyzers": "+".join(info.get("analyzers") or []),
        "languages": " ".join(f"{lang}={share:.2f}" for lang, share in (info.get("languages") or {}).items())
        or "-",
        "analyzer_per_language": " ".join(f"{k}:{v}" for k, v in (bm25.get("analyzers") or {}).items())
        or "-",
    }
    report = StepReport(metadata={**published.as_metadata(), **lag, **analysis}, stage=published)
    if run.checks:
        reads = integrity.published_reads(
            store, spec.collection, spec.name, dim, doc_ids=written, vector_scope=scope
        )
        report.checks = [
            checks.check_spans(reads.spans),
            checks.check_published_embeddings(reads.embeddings),
            checks.check_bm25_counts(reads.bm25),
        ]
    return report
