"""The documents asset of a collection: its folder or dataset, hashed and synced into Postgres."""

from chunkyard.assets.keys import collection_prefix, documents_key
from chunkyard.assets.progress import step_progress
from chunkyard.assets.resources import PostgresResource
from chunkyard.assets.results import materialize_result
from chunkyard.pipeline.steps.documents import CODE_VERSION, sync_documents
from chunkyard.pipeline.versions import code_version
from chunkyard.retrieval.settings.config import Collection
from dagster import AssetExecutionContext, AssetsDefinition, MaterializeResult, asset


def build_documents_asset(collection: Collection) -> AssetsDefinition:
    """`[collection, "documents"]`: what every index of the collection chunks."""
    name = collection.name
    source = (
        f"dataset `{collection.dataset}`"
        if collection.dataset
        else "folders " + ", ".join(f"`{f}`" for f in collection.folders)
    )
    settings = {
        "folders": collection.folders,
        "include": collection.include,
        "exclude": collection.exclude,
        "dataset": collection.dataset,
    }

    @asset(
        key=documents_key(name),
        group_name=collection_prefix(name),
        description=(
            f"Documents of collection `{name}` from {source}, hashed (sha256) and synced into Postgres."
            f"\n\n{collection.description}"
        ),
        code_version=code_version("documents", CODE_VERSION, settings),
        kinds={"python", "postgres"},
        metadata={"collection": name, "source": source},
    )
    def documents(context: AssetExecutionContext, postgres: PostgresResource) -> MaterializeResult:
        progress = step_progress(context.log, "files", "read")
        return materialize_result(context, sync_documents(postgres.store(), collection, progress))

    return documents
