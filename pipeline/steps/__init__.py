"""The pipeline steps, one module per kind of asset, each declaring its `CODE_VERSION` (`pipeline.versions`)."""
