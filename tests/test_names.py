"""Index names: one frozen value for `collection/config`, parsed once at the edge."""

from __future__ import annotations

import copy
import pickle

import pytest
from chunkyard.retrieval.settings.names import IndexName, IndexNameError


def test_an_index_name_is_its_two_parts_and_cannot_drift_from_them() -> None:
    name = IndexName.parse("mine/recursive-256")
    assert (name, name.collection, name.config) == ("mine/recursive-256", "mine", "recursive-256")
    with pytest.raises(AttributeError, match="immutable"):
        name.collection = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del name.config
    assert name == "mine/recursive-256" and name.collection == "mine"
    for copied in (pickle.loads(pickle.dumps(name)), copy.deepcopy(name), copy.copy(name)):
        assert (copied, copied.collection, copied.config) == (name, "mine", "recursive-256")
    assert IndexName.parse(name) is name  # parsed once: a parsed name passes through


def test_a_malformed_name_names_the_field() -> None:
    for bad in ("", "a/b/c", "/x", "x/"):
        with pytest.raises(IndexNameError, match="index"):
            IndexName.parse(bad)
