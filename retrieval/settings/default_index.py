"""The index a search, an evaluation, the service or a retriever reads when none is named: `default_index`.

One rule, used by every caller. A collection's default is its `default_index:` when set, else its only
index config (the one `chunkyard add` chose), else `recursive-256` when it lists it, else the first it
lists. The project's default is `default_index:` in chunkyard.yaml (`collection/config`, or a collection
name for that collection's default), else its only collection's default, else the `demo` collection's.
Outside a project (a database named by DATABASE_URL alone) it is `demo/recursive-256`, as before.
"""

from __future__ import annotations

from chunkyard.retrieval.settings.config import Collection, load_collections
from chunkyard.retrieval.settings.names import (
    DEFAULT_COLLECTION,
    DEFAULT_CONFIG,
    IndexName,
    IndexNameError,
    IndexRef,
)
from chunkyard.retrieval.settings.project import (
    PROJECT_FILE,
    ProjectError,
    SettingsError,
    at_line,
    project_root,
    read_project,
)

PROJECT_FIELD = "default_index"


class NoDefaultIndex(SettingsError):
    """No index is named and the project does not say which one to read; the message says how to
    (the CLI exits 2, the service answers 404, as for an index that does not exist)."""


def named(index: str | IndexRef | None) -> str | IndexRef:
    """`index` as given, or the project's default index when it is None."""
    return default_index() if index is None else index


def collection_default(collection: Collection) -> str:
    """The index config `collection` is searched with when a request names none."""
    if collection.default_index:
        return collection.default_index
    if not collection.indexes:
        raise NoDefaultIndex(
            f"collection {collection.name!r} lists no index config; add one under its `indexes:`"
        )
    if len(collection.indexes) == 1 or DEFAULT_CONFIG not in collection.indexes:
        return collection.indexes[0]
    return DEFAULT_CONFIG


def default_index(collection: str | None = None) -> IndexName:
    """The index read when none is named: `collection`'s default, or (None) the project's."""
    try:
        root = project_root()
    except ProjectError:
        return IndexName(collection or DEFAULT_COLLECTION, DEFAULT_CONFIG)
    collections = load_collections()
    path = root / PROJECT_FILE
    if collection is not None:
        if collection not in collections:
            raise NoDefaultIndex(
                f"collection {collection!r} is not in {path}; known: {', '.join(sorted(collections)) or 'none'}"
            )
        return IndexName(collection, collection_default(collections[collection]))
    project = read_project(root)
    named = project.get(PROJECT_FIELD)
    if named is not None:
        return _named(named, collections, at_line(path, project, PROJECT_FIELD))
    if not collections:
        raise NoDefaultIndex(
            f"{path} has no collections yet: `chunkyard add NAME FOLDER`, then `chunkyard index`"
        )
    if len(collections) == 1:
        (only,) = collections.values()
        return IndexName(only.name, collection_default(only))
    if DEFAULT_COLLECTION in collections:
        return IndexName(DEFAULT_COLLECTION, collection_default(collections[DEFAULT_COLLECTION]))
    raise NoDefaultIndex(
        f"{path} has {len(collections)} collections ({', '.join(sorted(collections))}) and no "
        f"`{PROJECT_FIELD}:`; name one with --index COLLECTION/CONFIG, or set `{PROJECT_FIELD}: COLLECTION` there"
    )


def _named(value: object, collections: dict[str, Collection], where: str) -> IndexName:
    """chunkyard.yaml's `default_index:`: `collection/config`, or a collection (its own default)."""
    if not isinstance(value, str) or not value.strip():
        raise NoDefaultIndex(f"{where}: {PROJECT_FIELD}: expected 'collection/config' or a collection name")
    if "/" not in value:
        if value not in collections:
            raise NoDefaultIndex(
                f"{where}: {PROJECT_FIELD}: no collection {value!r}; known: {', '.join(sorted(collections))}"
            )
        return IndexName(value, collection_default(collections[value]))
    try:
        index = IndexName.parse(value)
    except IndexNameError as exc:
        raise NoDefaultIndex(f"{where}: {PROJECT_FIELD}: {exc}") from exc
    if index.collection not in collections:
        raise NoDefaultIndex(
            f"{where}: {PROJECT_FIELD}: no collection {index.collection!r}; "
            f"known: {', '.join(sorted(collections))}"
        )
    return index
