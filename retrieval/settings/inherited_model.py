"""An index config that names no `embedding_model` takes its collection's choice: `for_collection`.

A collection chooses its model through its default index (`retrieval.settings.default_index`): the config
`chunkyard add` picked for the folder's languages (`recursive-256-multilingual` for a folder that is
not English only), or the one `default_index:` names. When that config sets `embedding_model` itself,
every other config of the collection that sets none is built with the same model, instead of the
bundled defaults' English one; `IndexConfig.model_from` then says where the model came from, and
`chunkyard check` and `chunkyard configs` print it. A config that sets its own model keeps it, and so
does one whose embedder is an embedding server's (its model is the server's) or the static tier's (a
table distilled from the model the config names).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from chunkyard.retrieval.settings.config import Collection, IndexConfig

# The embedder backends that run the named model itself (not a server's, not a distilled table).
MODEL_BACKENDS = frozenset({"onnx", "torch"})


@dataclass(frozen=True)
class CollectionModel:
    """The embedding model a collection chose, and the index config it chose it through."""

    model: str
    collection: str
    config: str

    @property
    def origin(self) -> str:
        """Where an inheriting config's model comes from, in plain words."""
        return f"collection {self.collection}'s default index {self.config}"


def runs_named_model(config: IndexConfig) -> bool:
    """Whether `config`'s embedder runs its `embedding_model` (onnx or torch)."""
    return str((config.embedder or {}).get("backend", "torch")) in MODEL_BACKENDS


def collection_model(collection: Collection, configs: dict[str, IndexConfig]) -> CollectionModel | None:
    """The model `collection`'s default index config sets itself, or None (no choice to inherit)."""
    from chunkyard.retrieval.settings.default_index import NoDefaultIndex, collection_default

    try:
        name = collection_default(collection)
    except NoDefaultIndex:
        return None
    chosen = configs.get(name)
    if chosen is None or chosen.model_from or not runs_named_model(chosen):
        return None
    return CollectionModel(chosen.embedding_model, collection.name, chosen.name)


def for_collection(
    config: IndexConfig, collection: Collection, configs: dict[str, IndexConfig]
) -> IndexConfig:
    """`config` as `collection` builds it: with the collection's model when it sets none itself."""
    if not config.model_from or not runs_named_model(config):
        return config
    chosen = collection_model(collection, configs)
    if chosen is None or chosen.model == config.embedding_model:
        return config
    return replace(config, embedding_model=chosen.model, model_from=chosen.origin)


def inherited_note(config: IndexConfig) -> str:
    """`, inherited from ...` for a config whose model its collection chose, else ""."""
    if not config.model_from or config.model_from == "defaults":
        return ""
    return f", inherited from {config.model_from} (the config sets no embedding_model)"
