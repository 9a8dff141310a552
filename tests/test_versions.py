"""Code versions come from declarations: a bump changes exactly the versions it covers; moving code changes none."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from chunkyard.chunking import registry
from chunkyard.pipeline.graph import INDEX_STEPS, step
from chunkyard.pipeline.versions import code_version
from chunkyard.retrieval.embedders.onnx_backend import OnnxEmbedder
from chunkyard.retrieval.embedders.torch_backend import TorchEmbedder

from tests.conftest import REPO_ROOT

# A config's settings as the assets hash them (every field an index step reads).
SETTINGS = {
    "collection": "c",
    "chunker": {"strategy": "recursive", "size": 64},
    "embedding_model": "all-MiniLM-L6-v2",
    "embedder": {"backend": "torch"},
    "bm25": {"k1": 1.2},
}


def _versions(settings: dict = SETTINGS) -> dict[str, str]:
    """Each index step's asset version for `settings` (the fields the step reads)."""
    return {
        s.name: code_version(s.name, s.code_version, {k: settings[k] for k in ("collection", *s.settings)})
        for s in INDEX_STEPS
    }


def test_settings_change_only_their_kind() -> None:
    declared = step("chunks").code_version
    assert code_version("chunks", declared, {"size": 1}) != code_version("chunks", declared, {"size": 2})
    assert code_version("chunks", declared, {"size": 1}) == code_version("chunks", declared, {"size": 1})
    assert code_version("chunks", declared, {"size": 1}) != code_version("embeddings", declared, {"size": 1})


def test_each_step_hashes_its_own_declared_version() -> None:
    """A bump of one step's CODE_VERSION moves that step's asset version only (its children go stale
    through Dagster's data versions, not through theirs)."""
    before = _versions()
    for bumped in INDEX_STEPS:
        after = {
            s.name: code_version(
                s.name,
                s.code_version + ("+" if s is bumped else ""),
                {k: SETTINGS[k] for k in ("collection", *s.settings)},
            )
            for s in INDEX_STEPS
        }
        assert {name for name in before if before[name] != after[name]} == {bumped.name}


def _strategy_versions() -> dict[str, str]:
    declared = step("chunks").code_version
    return {
        strategy: code_version("chunks", declared, {"chunker": {"strategy": strategy, "size": 64}})
        for strategy in ("token", "sentence", "recursive", "hierarchical", "late")
    }


@pytest.mark.parametrize(
    ("bumped", "changed"),
    [
        # late's default base is sentence, hierarchical's recursive
        ("sentence", {"sentence", "late"}),
        ("recursive", {"recursive", "hierarchical"}),
        ("token", {"token"}),
        ("hierarchical", {"hierarchical"}),
    ],
)
def test_a_strategy_bump_changes_only_its_configs_versions(
    monkeypatch: pytest.MonkeyPatch, bumped: str, changed: set[str]
) -> None:
    before = _strategy_versions()
    entry = registry.STRATEGY_TABLE[bumped]
    monkeypatch.setitem(
        registry.STRATEGY_TABLE, bumped, type(entry)(**{**entry.__dict__, "code_version": "2"})
    )
    after = _strategy_versions()
    assert {name for name in before if before[name] != after[name]} == changed


def test_a_backend_bump_changes_the_assets_that_embed_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    torch_before, onnx_before = _versions(), _versions({**SETTINGS, "embedder": {"backend": "onnx"}})
    monkeypatch.setattr(OnnxEmbedder, "code_version", "2")
    assert _versions() == torch_before  # another backend's bump: nothing of a torch config changes
    onnx_after = _versions({**SETTINGS, "embedder": {"backend": "onnx"}})
    assert {name for name in onnx_before if onnx_before[name] != onnx_after[name]} == {
        "embeddings",
        "publish",
    }
    monkeypatch.setattr(TorchEmbedder, "code_version", "2")
    assert _versions()["chunks"] == torch_before["chunks"]  # chunks read no embedder setting


_VERSIONS_OF_A_COPY = """
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path.insert(0, sys.argv[1])
import chunkyard
assert chunkyard.__file__.startswith(sys.argv[1]), chunkyard.__file__
from chunkyard.pipeline.graph import INDEX_STEPS
from chunkyard.pipeline.versions import code_version
settings = json.loads(sys.argv[2])
print(json.dumps({s.name: code_version(s.name, s.code_version, {k: settings[k] for k in ("collection", *s.settings)})
                  for s in INDEX_STEPS}))
"""


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The `chunkyard` package laid out as installed (`chunkyard/<folder>`), copied to be edited."""
    root = tmp_path / "copy"
    shutil.copytree(REPO_ROOT / "chunkyard", root / "chunkyard", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("chunking", "retrieval", "evaluation", "pipeline"):
        shutil.copytree(
            REPO_ROOT / folder, root / "chunkyard" / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    return root


def _versions_of(root: Path) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _VERSIONS_OF_A_COPY, str(root), json.dumps(SETTINGS)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_moving_a_helper_between_files_or_editing_a_comment_changes_no_version(package_copy: Path) -> None:
    """What import-closure hashing got wrong: a helper moved to another file changed the versions of
    every step that imported either file. Declared versions do not move with the code."""
    before = _versions_of(package_copy)
    assert before == _versions()  # the copy hashes like the tree
    indexing = package_copy / "chunkyard" / "retrieval" / "indexing"
    reports = (indexing / "stage_reports.py").read_text(encoding="utf-8")
    start = reports.index("def flat_metadata(")
    end = reports.index("\n\n\n", start)
    helper = reports[start:end]
    (indexing / "metadata.py").write_text(
        f'"""Stage reports as flat metadata."""\n\nfrom dataclasses import asdict\nfrom typing import Any\n\n\n{helper}\n',
        encoding="utf-8",
    )
    moved = reports[:start] + reports[end + 3 :]
    moved = moved.replace(
        "from typing import Any\n",
        "from typing import Any\n\nfrom chunkyard.retrieval.indexing.metadata import flat_metadata\n",
        1,
    )
    (indexing / "stage_reports.py").write_text(moved, encoding="utf-8")
    with (indexing / "publish.py").open("a", encoding="utf-8") as handle:
        handle.write("\n# an edit that changes nothing a publish writes\n")
    assert _versions_of(package_copy) == before
    # ... and the declaration is what moves it: a bump of the bm25 step changes bm25's version only
    bm25 = package_copy / "chunkyard" / "pipeline" / "steps" / "bm25.py"
    bm25.write_text(
        bm25.read_text(encoding="utf-8").replace('CODE_VERSION = "1"', 'CODE_VERSION = "2"'), encoding="utf-8"
    )
    after = _versions_of(package_copy)
    assert {name for name in before if before[name] != after[name]} == {"bm25"}
