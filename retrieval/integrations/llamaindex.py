"""LlamaIndex: `ChunkyardRetriever`, a `BaseRetriever` returning `NodeWithScore` over a chunkyard index or alias.

    pip install 'chunkyard[llamaindex]'

    retriever = ChunkyardRetriever(index="docs-live", url="http://127.0.0.1:8000", api_key="...")
    nodes = retriever.retrieve("How is an index named?")

Without `url` it searches in process. Each node is one chunk: a `TextNode` with the chunk id, its
exact text and span (`start_char_idx`/`end_char_idx` are document offsets) and the metadata of
`source.hit_metadata`; the score is the one the hit was ranked by. The bulky metadata (scores,
highlights, options) is kept out of what LlamaIndex shows the LLM and the embedder.
"""

from __future__ import annotations

from typing import Any

from chunkyard.retrieval.integrations.client import Client
from chunkyard.retrieval.integrations.source import HitSource, hit_metadata, ranking_score
from chunkyard.retrieval.query.results import SearchResult
from chunkyard.retrieval.query.searcher import Searcher
from chunkyard.retrieval.settings.options import SearchOptions
from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

__all__ = ["ChunkyardRetriever"]

# Metadata for programs, not for the prompt or the embedding.
HIDDEN_KEYS = ["chunk_id", "index_version", "start", "end", "rank", "scores", "highlights", "search_options"]


class ChunkyardRetriever(BaseRetriever):
    """chunkyard hits as LlamaIndex nodes; the search options are one `SearchOptions`."""

    def __init__(
        self,
        index: str | None = None,  # None: the project's default index
        options: SearchOptions | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        client: Client | None = None,
        searcher: Searcher | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self.index = index
        self.options = SearchOptions.of(options)
        self._source = HitSource.of(url, api_key, client=client, searcher=searcher)
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return _nodes(*self._source.search(query_bundle.query_str, self.index, self.options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return _nodes(*await self._source.asearch(query_bundle.query_str, self.index, self.options))


def _nodes(hits: list[SearchResult], effective: dict[str, Any]) -> list[NodeWithScore]:
    out = []
    for hit in hits:
        node = TextNode(
            id_=hit.chunk_id,
            text=hit.text,
            metadata=hit_metadata(hit, effective),
            start_char_idx=hit.start,
            end_char_idx=hit.end,
            excluded_llm_metadata_keys=HIDDEN_KEYS,
            excluded_embed_metadata_keys=HIDDEN_KEYS,
        )
        out.append(NodeWithScore(node=node, score=ranking_score(hit, str(effective.get("mode", "")))))
    return out
