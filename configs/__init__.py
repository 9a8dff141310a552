"""The bundled configs (indexes.yaml, collections.yaml): package data, installed as `chunkyard.bundled`."""
