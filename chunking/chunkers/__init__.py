"""One module per chunking strategy, named as the strategy, each with its `build`; the registry's
table (`chunking.registry`) refers to each `build` and declares each strategy's code version."""
