"""Retrievers for LangChain and LlamaIndex over chunkyard, against a running service or in process."""
