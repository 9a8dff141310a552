"""Index names: one small value for `collection/config`, parsed and validated in one place."""

from __future__ import annotations

DEFAULT_COLLECTION = "demo"
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
