"""An index config without `embedding_model` takes its collection's choice (the model `add` chose):
a Spanish collection's own config is built with the multilingual model, and `check` and `configs` say
where that model came from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from chunkyard.chunking.e5_model import MODEL_NAME
from chunkyard.chunking.types import Document
from chunkyard.orchestration.cli import main
from chunkyard.pipeline.graph import build_index
from chunkyard.retrieval.embedders.embedder import embedder_for_config
from chunkyard.retrieval.settings.config import load_index_configs
from chunkyard.retrieval.settings.config_checks import load_index_specs
from chunkyard.retrieval.store import Store

from tests.conftest import REPO_ROOT

SPANISH = REPO_ROOT / "tests" / "data" / "multilingual" / "es"
ORIGIN = "inherited from collection inherit-es's default index recursive-256-multilingual"


def _spanish_project(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    shutil.copy(sorted(SPANISH.glob("*.md"))[0], root / "docs")
    (root / "chunkyard.yaml").write_text(
        "collections:\n"
        "  inherit-es:\n    folders: [docs]\n    indexes: [recursive-256-multilingual, mine-200]\n"
        "indexes:\n  mine-200:\n    chunker: {strategy: recursive, size: 200}\n",
        encoding="utf-8",
    )
    return root


def test_a_config_without_a_model_is_built_with_the_collection_s_multilingual_one(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    root = _spanish_project(tmp_path / "proj")
    clean_env.chdir(root)
    assert load_index_configs()["mine-200"].embedding_model == "all-MiniLM-L6-v2"  # the config alone
    specs = {spec.config.name: spec for spec in load_index_specs()}
    mine = specs["mine-200"].config
    assert mine.embedding_model == MODEL_NAME and "inherit-es" in mine.model_from
    assert mine.config_hash != load_index_configs()["mine-200"].config_hash  # its own chunk ids
    capsys.readouterr()
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "inherit-es/mine-200:" in line)
    assert f"embedded by {MODEL_NAME} (onnx int8), {ORIGIN}" in line, line
    assert "warning:" not in out  # the inherited model suits the Spanish folder
    assert main(["configs"]) == 0
    assert f"  inherit-es/mine-200: embedded by {MODEL_NAME}, {ORIGIN}" in capsys.readouterr().out
    # built as `chunkyard index` builds it: the spec's config, its embedder, the published config
    spec = specs["mine-200"]
    documents = [Document(path.name, path.read_text(encoding="utf-8")) for path in (root / "docs").iterdir()]
    store.documents.sync(spec.collection, documents, [])
    embedder = embedder_for_config(spec.config)
    assert embedder.model_id.startswith(f"{MODEL_NAME}@onnx")
    build_index(store, spec, embedder)
    info = store.indexes.info(spec.name)
    assert info is not None and info["config"]["embedding_model"] == MODEL_NAME


def test_a_config_that_names_its_model_or_a_collection_without_a_choice_keeps_the_default(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    root = _spanish_project(tmp_path / "proj")
    text = (root / "chunkyard.yaml").read_text()
    (root / "chunkyard.yaml").write_text(
        text.replace("size: 200}", "size: 200}\n    embedding_model: all-MiniLM-L6-v2")
    )
    clean_env.chdir(root)
    specs = {spec.config.name: spec.config for spec in load_index_specs()}
    assert specs["mine-200"].embedding_model == "all-MiniLM-L6-v2" and not specs["mine-200"].model_from
    # the default index (the only one) sets no model itself: nothing to inherit
    (root / "chunkyard.yaml").write_text(text.replace("recursive-256-multilingual, ", ""))
    (config,) = (spec.config for spec in load_index_specs())
    assert config.embedding_model == "all-MiniLM-L6-v2" and config.model_from == "defaults"
