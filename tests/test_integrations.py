"""LangChain and LlamaIndex retrievers (issue 36) on the real packages, a real service and a real index.

Both retrievers run against the running service (with its API key) and in process, take one
`SearchOptions`, and carry the index, span, page or slide, scores, highlights and the options that
ran; each is used in a small pipeline the way its framework's docs show.
"""

from __future__ import annotations

import asyncio

import pytest
from chunkyard.retrieval.api.service import create_app
from chunkyard.retrieval.integrations.client import AuthenticationError, Client
from chunkyard.retrieval.query import Searcher
from chunkyard.retrieval.settings.options import SearchOptions

from tests.located_index import build_located
from tests.service_process import serve_in_thread

langchain_core = pytest.importorskip(
    "langchain_core", reason="the langchain extra is not installed (pip install 'chunkyard[langchain]')"
)
llama_index_core = pytest.importorskip(
    "llama_index.core", reason="the llamaindex extra is not installed (pip install 'chunkyard[llamaindex]')"
)

KEY = "test-key-36"
BERTH = "How much does a berth cost per metre?"


@pytest.fixture(scope="module")
def searcher(store, embedder) -> Searcher:
    return Searcher(store, embedder)


@pytest.fixture(scope="module")
def index(searcher: Searcher, store, embedder, tmp_path_factory) -> str:
    name, _ = build_located(store, embedder, tmp_path_factory.mktemp("located"))
    return name


@pytest.fixture(scope="module")
def url(searcher: Searcher, index: str):
    with serve_in_thread(create_app(searcher, api_key=KEY)) as base:
        yield base


def _check_berth(metadata: dict, index: str) -> None:
    assert metadata["index"] == index and metadata["doc_id"] == "harbour-guide.pdf"
    assert metadata["page"] == 2 and metadata["pages"] == [1, 3]  # the highlight's page, the chunk's range
    assert "2,60 $ per metre" in metadata["highlights"][0]["text"] and "2,60 $" in metadata["snippet"]
    assert metadata["start"] < metadata["highlights"][0]["start"] < metadata["end"]
    assert set(metadata["scores"]) >= {"dense", "bm25"}
    assert metadata["search_options"] == {"index": index, "mode": "hybrid", "k": 2}


def test_langchain_retriever_through_the_service_and_in_process(url: str, index: str, searcher) -> None:
    from chunkyard.retrieval.integrations.langchain import ChunkyardRetriever

    options = SearchOptions(k=2, mode="hybrid")
    remote = ChunkyardRetriever(index=index, options=options, url=url, api_key=KEY)
    docs = remote.invoke(BERTH)
    assert len(docs) == 2 and docs[0].page_content.startswith("Harbour guide")
    _check_berth(docs[0].metadata, index)
    again = asyncio.run(remote.ainvoke(BERTH))  # the async path
    assert [d.id for d in again] == [d.id for d in docs]
    local = ChunkyardRetriever(index=index, options=options, searcher=searcher)
    assert [d.id for d in local.invoke(BERTH)] == [d.id for d in docs]
    with pytest.raises(AuthenticationError):
        ChunkyardRetriever(index=index, url=url, api_key="wrong").invoke(BERTH)


def test_langchain_rag_chain_puts_the_located_answer_in_the_prompt(url: str, index: str) -> None:
    from chunkyard.retrieval.integrations.langchain import ChunkyardRetriever
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    retriever = ChunkyardRetriever(index=index, options=SearchOptions(k=1), client=Client(url, api_key=KEY))

    def format_docs(docs) -> str:
        return "\n".join(
            f"[{d.metadata['doc_id']} p.{d.metadata.get('page')}] {d.metadata['snippet']}" for d in docs
        )

    prompt = ChatPromptTemplate.from_template("Answer from the context.\n{context}\nQuestion: {question}")
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt
    text = chain.invoke(BERTH).to_string()
    assert "[harbour-guide.pdf p.2]" in text and "2,60 $ per metre" in text


def test_llamaindex_retriever_through_the_service_and_in_process(url: str, index: str, searcher) -> None:
    from chunkyard.retrieval.integrations.llamaindex import ChunkyardRetriever
    from llama_index.core.schema import QueryBundle

    options = SearchOptions(k=2, mode="hybrid")
    remote = ChunkyardRetriever(index, options, url=url, api_key=KEY)
    nodes = remote.retrieve(BERTH)
    assert len(nodes) == 2 and nodes[0].score >= nodes[1].score > 0
    node = nodes[0].node
    assert (node.start_char_idx, node.end_char_idx) == (node.metadata["start"], node.metadata["end"])
    _check_berth(node.metadata, index)
    assert "scores" not in node.get_content(metadata_mode="llm")  # bulky metadata stays out of prompts
    again = asyncio.run(remote.aretrieve(QueryBundle(BERTH)))
    assert [n.node.node_id for n in again] == [n.node.node_id for n in nodes]
    local = ChunkyardRetriever(index, options, searcher=searcher)
    assert [n.node.node_id for n in local.retrieve(BERTH)] == [n.node.node_id for n in nodes]


def test_llamaindex_query_engine_returns_the_located_source_nodes(url: str, index: str) -> None:
    from chunkyard.retrieval.integrations.llamaindex import ChunkyardRetriever
    from llama_index.core import get_response_synthesizer
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    retriever = ChunkyardRetriever(index, SearchOptions(k=2), url=url, api_key=KEY)
    synthesizer = get_response_synthesizer(llm=MockLLM(max_tokens=8), response_mode="compact")
    engine = RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer)
    response = engine.query("When does the beacon upgrade ship?")
    top = response.source_nodes[0].node.metadata
    assert top["doc_id"] == "lighthouse-review.pptx" and top["slide"] == 2
    assert top["deck_title"] == "Lighthouse review"
