"""Context scoring: rank small chunks with evidence from the text around them (multi-scale retrieval).

A small chunk is a precise answer (little text to read, high IoU), but its own words often miss
part of the question while the passage around it has them. With `context_scoring` in an index
config, every first-stage candidate also gets a score for its *context* (the larger scale) and,
optionally, for its best window of `focus_size` terms (the finer scale), mixed with its own:

    score = (1 - weight - focus_weight) * own + weight * context + focus_weight * focus
            (each min-max normalised over the candidates)

The context of a chunk is the chunk with its `neighbours` chunks on each side in the same
document (`span: neighbours`), or every chunk sharing its hierarchical parent (`span: parent`).
It is scored with the signals of the search mode: BM25 of the context as one text (term
frequencies and lengths summed over its chunks, the index's idf, the mean context length as
avgdl; without chunk overlap this is exactly BM25 of the concatenated span) and the cosine
between the query and the mean of the context's chunk vectors. Nothing new is stored or
embedded: chunk ids, spans and vectors stay those of the index, and returned chunks are still
exact spans; only their order changes. The settings (`ContextScoring`) are in `retrieval.settings.options`.

What the contexts are scored with (term frequencies, document frequencies, vectors, each chunk's
analysed terms) is loaded once per index version (`ContextStatistics`, like the in-memory BM25
copy), so a query sends no statement of its own; `score_contexts` is the per-query SQL twin
(`Searcher(context_backend="sql")`), kept for indexes too large to hold in memory.
"""

from chunkyard.retrieval.query.context.layout import ChunkLayout
from chunkyard.retrieval.query.context.loaded import Layouts
from chunkyard.retrieval.query.context.ranking import rank_with_context

__all__ = ["ChunkLayout", "Layouts", "rank_with_context"]
