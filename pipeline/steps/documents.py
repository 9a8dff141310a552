"""Step `documents`: load a collection's documents and sync them (by sha256) into the store."""

from __future__ import annotations

import time
from collections.abc import Callable

from chunkyard.chunking.documents.printable import printable
from chunkyard.pipeline.documents import CollectionDocuments, load_collection_documents
from chunkyard.pipeline.step_report import StepReport
from chunkyard.retrieval.settings.config import Collection
from chunkyard.retrieval.store import Store
from chunkyard.retrieval.store.documents import DocumentSync, StaleSignatures

# Bump when this module or what it reads with (`pipeline.documents`, `chunking.documents`) changes the
# documents it stores.
CODE_VERSION = "1"


def sync_documents(
    store: Store, collection: Collection, progress: Callable[[int, int], None] | None = None
) -> StepReport:
    """Load and sync; when no folder is readable (missing, unmounted) the stored documents are kept.

    Files whose stat signature matches the stored one are not read again (`chunking.documents.folder`).
    """
    started = time.perf_counter()
    name = collection.name
    loaded = load_collection_documents(collection, store.documents.signatures(name), progress)
    report = StepReport(
        warnings=[f"{name}: skipped {printable(f.path)}: {printable(f.reason)}" for f in loaded.failures]
    )
    if loaded.usable:
        try:
            sync = _sync(store, name, loaded)
        except StaleSignatures:  # documents deleted meanwhile (another sync): read every file
            loaded = load_collection_documents(collection)
            sync = _sync(store, name, loaded)
        report.metadata.update(sync.as_metadata())
        report.ids = {"added_ids": sync.added, "changed_ids": sync.changed, "deleted_ids": sync.deleted}
    else:
        kept = len(store.documents.hashes(name))
        report.warnings.append(
            f"{name}: no documents folder is readable; keeping the {kept} stored documents"
        )
        report.metadata.update(
            {
                "documents_added": 0,
                "documents_changed": 0,
                "documents_deleted": 0,
                "documents_unchanged": kept,
                "documents_failed": len(loaded.failures),
            }
        )
        report.ids = {"added_ids": [], "changed_ids": [], "deleted_ids": []}
    report.metadata["documents_total"] = loaded.total
    report.metadata["documents_read"] = len(loaded.documents)
    report.failures = list(loaded.failures)
    report.metadata["seconds"] = float(time.perf_counter() - started)
    return report


def _sync(store: Store, name: str, loaded: CollectionDocuments) -> DocumentSync:
    return store.documents.sync(
        name, loaded.documents, loaded.failures, unchanged=loaded.unchanged, signatures=loaded.signatures
    )
