"""Dagster resources: the Postgres store and the embedding models.

Nothing heavy is imported here at module level: torch and sentence-transformers load in
`setup_for_execution` (inside a run), never when the code location loads. Dagster sets a resource
up once per step process (once per run in process, once per sensor tick) and tears it down after:
the Store lives exactly that long, one pool and one migration check for all its steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

if TYPE_CHECKING:
    from chunkyard.retrieval.embedders.embedder import Embedder
    from chunkyard.retrieval.settings.config import IndexConfig
    from chunkyard.retrieval.store import Store


class PostgresResource(ConfigurableResource):
    """chunkyard's database: `url` if given, else DATABASE_URL, else the embedded pgserver."""

    url: str | None = None
    _store: Store | None = PrivateAttr(default=None)

    def database_url(self) -> str:
        from chunkyard.retrieval.store.db import database_url

        return self.url or database_url()

    def store(self) -> Store:
        """This execution's migrated `retrieval.store.Store`, opened on first use (a sensor tick
        that needs no database opens none) and closed in `teardown_after_execution`."""
        if self._store is None:
            from chunkyard.retrieval.store import Store

            store = Store(self.database_url())
            store.migrate()
            self._store = store
        return self._store

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


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
        # use. The ONNX backend needs neither torch nor sentence-transformers (retrieval.embedders.onnx_encoder).
        if self.preload:
            self.get()

    def get(self, model: str | None = None, /, **overrides: Any) -> Embedder:
        """The process-wide Embedder for `model` (default: this resource's) with an index config's
        `embedder:` options over this resource's defaults; an unknown option is an error naming it.

        The same shared instance the query side uses (`retrieval.embedders.embedder.shared_embedder`), so an
        asset and a search of one config load one model and agree on its options. `model` is
        positional: an embedding server's options (`backend: openai`) have a `model` of their own.
        """
        from chunkyard.retrieval.embedders.embedder import shared_embedder

        settings = {"backend": self.backend, "batch_size": self.batch_size, "device": self.device}
        settings.update(overrides)
        return shared_embedder(model or self.model, **settings)

    def for_config(self, config: IndexConfig) -> Embedder:
        """The Embedder an `IndexConfig` asks for (its `embedding_model` and `embedder:` options)."""
        return self.get(config.embedding_model, **(config.embedder or {}))
