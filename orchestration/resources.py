"""Dagster resources: the Postgres store and the embedding models.

Nothing heavy is imported here at module level: torch and sentence-transformers load in
`setup_for_execution` (inside a run), never when the code location loads.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dagster import ConfigurableResource, InitResourceContext

if TYPE_CHECKING:
    from retrieval.config import IndexConfig
    from retrieval.embedder import Embedder
    from retrieval.store import Store


class PostgresResource(ConfigurableResource):
    """chunkyard's database: `url` if given, else DATABASE_URL, else the embedded pgserver."""

    url: str | None = None

    def database_url(self) -> str:
        from retrieval.db import database_url

        return self.url or database_url()

    def store(self) -> Store:
        """A migrated `retrieval.store.Store` on this database."""
        from retrieval.store import Store

        store = Store(self.database_url())
        store.migrate()
        return store


# One loaded model per (model, backend, quantisation, batch size, device) per process: a run's
# assets share it instead of loading the weights once per asset.
_EMBEDDERS: dict[tuple[str, str, str | None, int, str], Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def cached_embedder(
    model: str,
    backend: str = "torch",
    quantize: str | None = None,
    batch_size: int = 32,
    device: str = "cpu",
) -> Embedder:
    """The process-wide Embedder for these settings (loaded on first use)."""
    key = (model, backend, quantize, batch_size, device)
    with _EMBEDDERS_LOCK:
        if key not in _EMBEDDERS:
            from retrieval.embedder import Embedder

            _EMBEDDERS[key] = Embedder(
                model, backend=backend, quantize=quantize, batch_size=batch_size, device=device
            )
        return _EMBEDDERS[key]


class EmbedderResource(ConfigurableResource):
    """Embedding models. Index configs name their model; these fields are the run-wide defaults.

    `model` may be a known name (all-MiniLM-L6-v2) or a local directory. `backend`, `batch_size`
    and `device` apply unless an index config's `embedder:` section overrides them.
    """

    model: str = "all-MiniLM-L6-v2"
    backend: str = "torch"
    batch_size: int = 32
    device: str = "cpu"
    preload: bool = False

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Models load inside the run, never at code-location load: here with `preload`, else on first
        # use. The ONNX backend needs neither torch nor sentence-transformers (retrieval.onnx_encoder).
        if self.preload:
            self.get()

    def get(self, model: str | None = None, **overrides: str | int | None) -> Embedder:
        """The Embedder for `model` (default: this resource's), with config overrides applied."""
        settings = {"backend": self.backend, "batch_size": self.batch_size, "device": self.device}
        settings.update(
            {k: v for k, v in overrides.items() if k in ("backend", "quantize", "batch_size", "device")}
        )
        return cached_embedder(model or self.model, **settings)

    def for_config(self, config: IndexConfig) -> Embedder:
        """The Embedder an `IndexConfig` asks for (its `embedding_model` and `embedder:` options)."""
        return self.get(config.embedding_model, **(config.embedder or {}))
