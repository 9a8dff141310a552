"""One module per chunking strategy, named as the strategy, each with its `build`; the registry's
table holds each strategy's fields and imports only the module a config names, so a strategy's code
version (pipeline.versions) covers its own module and what it imports, not every other strategy."""
