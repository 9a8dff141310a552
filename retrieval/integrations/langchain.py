"""LangChain: `ChunkyardRetriever`, a `BaseRetriever` (sync and async) over a chunkyard index or alias.

    pip install 'chunkyard[langchain]'

    retriever = ChunkyardRetriever(index="docs-live", url="http://127.0.0.1:8000", api_key="...")
    retriever = ChunkyardRetriever(index="demo/recursive-256", options=SearchOptions(k=3, mode="hybrid"))
    docs = retriever.invoke("How is an index named?")

Without `url` it searches in process (`chunkyard.search`'s Searcher, or the `searcher` given). Each
`Document` is one chunk: `page_content` its exact text, `id` its chunk id, and `metadata` what
`source.hit_metadata` lists (index, doc_id, start/end, page or slide, heading path, scores,
highlights, snippet, the search options that ran).
"""

from __future__ import annotations

from typing import Any

from chunkyard.retrieval.embedders.rerankers import Reranker
from chunkyard.retrieval.integrations.client import Client
from chunkyard.retrieval.integrations.source import HitSource, hit_metadata
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.query.searcher import Searcher
from chunkyard.retrieval.settings.options import SearchOptions
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

__all__ = ["ChunkyardRetriever"]


class ChunkyardRetriever(BaseRetriever):
    """chunkyard hits as LangChain `Document`s; the search options are one `SearchOptions`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: str | None = Field(
        None,
        description="`collection/config`, a bare config name, or an alias (None: the project's default).",
    )
    options: SearchOptions = Field(default_factory=SearchOptions, description="k, mode, filters, ...")
    url: str | None = Field(None, description="A running `chunkyard serve`; None: search in process.")
    api_key: str | None = Field(None, description="The service's key (default: CHUNKYARD_API_KEY).")
    client: Client | None = Field(None, description="A ready `chunkyard.Client` instead of `url`.")
    searcher: Searcher | None = Field(None, description="The in-process Searcher (default: chunkyard's).")
    _source: HitSource = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._source = HitSource.of(self.url, self.api_key, client=self.client, searcher=self.searcher)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(*self._source.search(query, self.index, self.options))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(*await self._source.asearch(query, self.index, self.options))


# SearchOptions names `Reranker` only for type checkers: pydantic resolves it here.
ChunkyardRetriever.model_rebuild(_types_namespace={"Reranker": Reranker})


def _documents(hits: list[SearchResult], effective: dict[str, Any]) -> list[Document]:
    return [
        Document(page_content=hit.text, metadata=hit_metadata(hit, effective), id=hit.chunk_id)
        for hit in hits
    ]
