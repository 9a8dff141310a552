"""Index names: `collection/config` (`IndexName`) and "an alias or an index" (`IndexRef`), parsed once."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_COLLECTION = "demo"
DEFAULT_CONFIG = "recursive-256"  # the index config a search that names none reads
ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
CONFIG_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")  # collection and index config names
SNAPSHOT_MARK = "@v"  # `config@v3`: a config name never holds '@', so no publishable index has this name


class IndexNameError(ValueError):
    """An index name is malformed; the message names the field and the expected shape."""


class IndexName(str):
    """`collection/config` as the database and the API spell it, with its two parts named.

    It is a `str`, so it goes into SQL parameters, JSON and dict keys as the text it stands for;
    code reads `.collection` and `.config` instead of splitting that text by hand.
    """

    __slots__ = ("collection", "config")
    collection: str
    config: str

    def __new__(cls, collection: str, config: str) -> IndexName:
        for field, value in (("collection", collection), ("config", config)):
            if not isinstance(value, str) or "/" in value or not value.strip():
                raise IndexNameError(f"index: {field} must be a non-empty name without '/', got {value!r}")
        self = super().__new__(cls, f"{collection}/{config}")
        object.__setattr__(self, "collection", collection)
        object.__setattr__(self, "config", config)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        """Frozen: the parts are the text, so neither may change without the other."""
        raise AttributeError(f"IndexName is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"IndexName is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[IndexName], tuple[str, str]]:
        return (IndexName, (self.collection, self.config))

    @classmethod
    def parse(cls, text: str, default_collection: str = DEFAULT_COLLECTION) -> IndexName:
        """`collection/config`, or a bare config name in `default_collection`."""
        if isinstance(text, IndexName):
            return text
        if not isinstance(text, str) or not text.strip():
            raise IndexNameError("index: must be a non-empty string like 'demo/recursive-256'")
        collection, sep, config = text.partition("/")
        if not sep:
            return cls(default_collection, text)
        if "/" in config:
            raise IndexNameError(f"index: expected 'collection/config' with one '/', got {text!r}")
        return cls(collection, config)

    def sibling(self, config: str) -> IndexName:
        """The index of another config in the same collection (a coarse companion, say)."""
        return IndexName(self.collection, config)

    def snapshot(self, version: int) -> IndexName:
        """The read-only copy of this index at `version` (`collection/config@v3`, see aliases)."""
        return IndexName(self.collection, f"{self.config}{SNAPSHOT_MARK}{int(version)}")

    @property
    def snapshot_of(self) -> tuple[IndexName, int] | None:
        """(live index, version) when this names a snapshot, else None."""
        config, mark, version = self.config.rpartition(SNAPSHOT_MARK)
        if not mark or not config or not version.isdigit():
            return None
        return IndexName(self.collection, config), int(version)


@dataclass(frozen=True)
class IndexRef:
    """What a search names: an alias or an index, as the caller wrote it.

    `collection/config` is always an index. A bare name is an alias when one by that name exists,
    else a config name in the default collection (`retrieval.settings.config.default_collection`); only the
    database can tell, so the Searcher decides once per call (`index(default_collection)`).
    """

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise IndexNameError("index: must be a non-empty string like 'demo/recursive-256'")

    @classmethod
    def of(cls, ref: IndexRef | str) -> IndexRef:
        return ref if isinstance(ref, IndexRef) else cls(ref)

    @property
    def alias(self) -> str | None:
        """The alias this may name (a bare name an alias may have), else None."""
        return self.text if "/" not in self.text and ALIAS_NAME.match(self.text) else None  # the one rule

    def index(self, default_collection: str = DEFAULT_COLLECTION) -> IndexName:
        """The index this names when it is not an alias (a bare name: a config in `default_collection`)."""
        return IndexName.parse(self.text, default_collection)

    def __str__(self) -> str:
        return self.text


def is_valid_name(name: str) -> bool:
    """Collection and index config names: lowercase letters, digits, '-', '_' and '.'."""
    return bool(CONFIG_NAME.match(name))
