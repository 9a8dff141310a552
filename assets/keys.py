"""The one spelling of collection and index names as Dagster asset keys and groups.

Dagster names allow `[A-Za-z0-9_]` only, so `recursive-256` is spelled `recursive_256` and a
collection `2024` is `_2024`. That spelling folds `-` and `.` into `_`: `a-b` and `a_b` would share
their assets, so `check_spellings` refuses two names that spell alike. The assets, the CLI's
selection and the sensor's targets all read their keys here.
"""

from __future__ import annotations

from collections.abc import Iterable

from chunkyard.retrieval.settings.config import SettingsError
from chunkyard.retrieval.settings.names import IndexName
from dagster import AssetKey


def safe_name(name: str) -> str:
    """A Dagster-legal name part: `recursive-256` -> `recursive_256`, `2024` -> `_2024`."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    return cleaned if not cleaned[:1].isdigit() else f"_{cleaned}"


def check_spellings(field: str, names: Iterable[str]) -> None:
    """Raise a SettingsError naming `field` when two `names` spell to the same key part."""
    seen: dict[str, str] = {}
    for name in sorted(names):
        spelled = safe_name(name)
        if spelled in seen:
            raise SettingsError(
                f"{field}: {seen[spelled]!r} and {name!r} share the Dagster name {spelled!r}; rename one"
            )
        seen[spelled] = name


def collection_prefix(collection: str) -> str:
    """The first key part of every asset of `collection` (and its group name)."""
    return safe_name(collection)


def group_name(name: IndexName) -> str:
    """The group of one index's assets: `collection__config`."""
    return f"{safe_name(name.collection)}__{safe_name(name.config)}"


def index_key(name: IndexName, kind: str) -> AssetKey:
    return AssetKey([safe_name(name.collection), safe_name(name.config), kind])


def documents_key(collection: str) -> AssetKey:
    return AssetKey([collection_prefix(collection), "documents"])


def leaderboard_key(collection: str) -> AssetKey:
    return AssetKey([collection_prefix(collection), "leaderboard"])


def promotion_key(collection: str) -> AssetKey:
    return AssetKey([collection_prefix(collection), "promotion"])


def collection_keys(collection: str, keys: Iterable[AssetKey]) -> list[AssetKey]:
    """Those of `keys` that belong to `collection` (what `chunkyard index NAME` runs)."""
    prefix = collection_prefix(collection)
    return [key for key in keys if key.path[0] == prefix]


def index_job_name(collection: str) -> str:
    """The named job that indexes `collection` (`chunkyard index NAME`, its sensor's and reconciler's
    runs): the UI's runs page shows this name, not Dagster's implicit asset job."""
    return f"index_{safe_name(collection)}"
