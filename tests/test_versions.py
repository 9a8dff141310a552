"""Code versions derived from imports: an edit changes exactly the versions of the steps that run it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.pipeline.versions import (
    KINDS,
    PACKAGES,
    code_version,
    import_closure,
    module_path,
    step_module,
)

from tests.conftest import REPO_ROOT


@pytest.fixture
def library_copy(tmp_path: Path) -> Path:
    """The library packages copied to a temporary root, to be edited there."""
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _versions(root: Path) -> dict[str, str]:
    return {kind: code_version(kind, {"collection": "c"}, root=root) for kind in KINDS}


@pytest.mark.parametrize(
    ("edited", "dependents"),
    [
        # the embedder runs when chunking with a model, embedding and querying: not for BM25 or publish
        ("retrieval/embedder.py", {"chunks", "embeddings", "evaluation"}),
        ("retrieval/indexing/terms.py", {"bm25"}),
        ("retrieval/indexing/publishing.py", {"index"}),
        ("retrieval/query/searcher.py", {"evaluation"}),
        ("evaluation/reports.py", {"leaderboard", "promotion"}),
        ("chunking/documents/files.py", {"documents", "evaluation"}),
    ],
)
def test_an_edit_changes_exactly_the_dependent_versions(
    library_copy: Path, edited: str, dependents: set[str]
) -> None:
    before = _versions(library_copy)
    assert before == _versions(REPO_ROOT)  # the copy hashes like the tree
    with (library_copy / edited).open("a", encoding="utf-8") as handle:
        handle.write("\n# an edit\n")
    after = _versions(library_copy)
    assert {kind for kind in KINDS if before[kind] != after[kind]} == dependents


def test_settings_change_only_their_kind() -> None:
    assert code_version("chunks", {"size": 1}) != code_version("chunks", {"size": 2})
    assert code_version("chunks", {"size": 1}) == code_version("chunks", {"size": 1})
    assert code_version("chunks", {"size": 1}) != code_version("embeddings", {"size": 1})


_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_the_closure_holds_every_project_module_the_step_loads(kind: str) -> None:
    """Import the step in a fresh interpreter: every project module it loads must be in its closure
    (a module left out would let its edits pass without making the assets stale)."""
    module = step_module(kind)
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, module], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = {m for m in json.loads(done.stdout) if module_path(m) is not None}
    closure = import_closure(module)
    assert module in closure
    assert loaded - closure == set()


def test_function_level_imports_are_followed() -> None:
    # the step reaches the registry and the model's tokenizer through function-level imports ...
    assert {"chunkyard.chunking.registry", "chunkyard.chunking.tokenizers"} <= import_closure(
        step_module("chunks")
    )
    # ... but the query modules behind the lazy `retrieval.search()` do not run when building indexes,
    # and no strategy's module is in the step's own closure: the settings name the one that runs
    assert not any(m.startswith("chunkyard.retrieval.query") for m in import_closure(step_module("chunks")))
    assert not any(
        m.startswith("chunkyard.chunking.chunkers.") for m in import_closure(step_module("chunks"))
    )


def _strategy_versions(root: Path) -> dict[str, str]:
    return {
        strategy: code_version("chunks", {"chunker": {"strategy": strategy, "size": 64}}, root=root)
        for strategy in ("token", "sentence", "recursive", "hierarchical", "late")
    }


@pytest.mark.parametrize(
    ("edited", "changed"),
    [
        # late's default base is sentence, hierarchical's recursive; late also imports token and recursive
        ("chunking/chunkers/sentence.py", {"sentence", "late"}),
        ("chunking/chunkers/token.py", {"token", "late"}),
        ("chunking/chunkers/hierarchical.py", {"hierarchical"}),
        ("chunking/base.py", {"token", "sentence", "recursive", "hierarchical", "late"}),
    ],
)
def test_editing_one_strategy_changes_only_its_configs_versions(
    library_copy: Path, edited: str, changed: set[str]
) -> None:
    before = _strategy_versions(library_copy)
    assert before == _strategy_versions(REPO_ROOT)
    with (library_copy / edited).open("a", encoding="utf-8") as handle:
        handle.write("\n# an edit\n")
    after = _strategy_versions(library_copy)
    assert {name for name in before if before[name] != after[name]} == changed
