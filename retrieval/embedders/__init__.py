"""Models that turn text into vectors and scores: the embedder protocol and factory, its local and endpoint backends, rerankers."""
