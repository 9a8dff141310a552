"""Projects: found from the current folder up or named; state only inside one; bundled configs as
package data; project collections and index configs over the bundled ones; errors with file:line."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from chunkyard.retrieval.settings.config import SettingsError, load_collections, load_index_configs
from chunkyard.retrieval.settings.config_checks import load_index_specs
from chunkyard.retrieval.settings.project import ProjectError, find_project, project_root

from tests.conftest import REPO_ROOT

PROJECT_VARIABLES = ("CHUNKYARD_PROJECT", "CHUNKYARD_PROJECT_DIR", "CHUNKYARD_HOME", "CHUNKYARD_CONFIGS")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*PROJECT_VARIABLES, "CHUNKYARD_BENCHMARKS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "chunkyard.yaml").write_text(text, encoding="utf-8")
    return root


def test_found_from_any_folder_below_and_named_by_the_environment(tmp_path: Path, clean_env) -> None:
    root = _project(tmp_path / "proj", "collections: {}\n")
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project(deep) == root.resolve()
    assert find_project(tmp_path) is None
    clean_env.chdir(deep)
    assert project_root() == root.resolve()
    clean_env.chdir(tmp_path)
    with pytest.raises(ProjectError, match="chunkyard init"):
        project_root()
    clean_env.setenv("CHUNKYARD_PROJECT", str(root))
    assert project_root() == root.resolve()
    clean_env.setenv("CHUNKYARD_PROJECT", str(tmp_path))  # a folder without chunkyard.yaml
    with pytest.raises(ProjectError, match="not a chunkyard project"):
        project_root()
    clean_env.delenv("CHUNKYARD_PROJECT")
    clean_env.setenv("CHUNKYARD_PROJECT_DIR", str(root))  # the older variable still names it
    assert project_root() == root.resolve()


def test_the_repository_is_a_project(clean_env) -> None:
    clean_env.chdir(REPO_ROOT / "docs")
    assert project_root() == REPO_ROOT
    assert list(load_collections()) == ["demo"]  # the benchmark is off unless enabled


def test_state_lives_in_the_project_and_never_outside_one(tmp_path: Path, clean_env) -> None:
    from chunkyard.retrieval.store.db import chunkyard_home

    clean_env.chdir(tmp_path)
    with pytest.raises(ProjectError):
        chunkyard_home()
    assert list(tmp_path.iterdir()) == []  # nothing created
    root = _project(tmp_path / "proj", "collections: {}\n")
    clean_env.chdir(root)
    assert chunkyard_home() == root.resolve() / ".chunkyard"
    clean_env.setenv("CHUNKYARD_HOME", str(tmp_path / "elsewhere"))
    assert chunkyard_home() == (tmp_path / "elsewhere").resolve()


def test_a_project_shows_its_own_collections_over_the_bundled_index_configs(
    tmp_path: Path, clean_env
) -> None:
    docs = tmp_path / "proj" / "notes"
    docs.mkdir(parents=True)
    root = _project(
        tmp_path / "proj",
        "collections:\n"
        "  mine:\n"
        "    folders: [notes]\n"
        "    indexes: [recursive-256, tiny]\n"
        "indexes:\n"
        "  tiny:\n"
        "    chunker: {strategy: token, size: 32, overlap: 0, tokenizer: words}\n",
    )
    clean_env.chdir(root)
    collections = load_collections()
    assert list(collections) == ["mine"]
    assert collections["mine"].folder_paths() == [docs.resolve()]
    configs = load_index_configs()
    assert "tiny" in configs and "recursive-256" in configs  # the bundled ones stay available
    assert configs["tiny"].embedder == configs["recursive-256"].embedder  # bundled defaults apply
    assert {s.name for s in load_index_specs()} == {"mine/recursive-256", "mine/tiny"}
    # benchmarks on (flag or environment): the bundled benchmark collection is added
    assert "chroma_general" in load_collections(include_benchmarks=True)
    clean_env.setenv("CHUNKYARD_BENCHMARKS", "1")
    assert set(load_collections()) == {"mine", "chroma_general"}


def test_config_errors_name_the_file_and_line(tmp_path: Path, clean_env) -> None:
    root = _project(
        tmp_path / "proj",
        "# my project\ncollections:\n  mine:\n    folders: [x]\n    indexes: [recursive-256]\n"
        "  other:\n    folders: [y]\n    colour: red\n",
    )
    clean_env.chdir(root)
    with pytest.raises(SettingsError) as error:
        load_collections()
    assert f"{root.resolve() / 'chunkyard.yaml'}:8: collections.other.colour" in str(error.value)  # its line
    assert "colour" in str(error.value)
    _project(root, "collections:\n  mine:\n    folders: [x]\n    indexes: [no-such]\n")
    with pytest.raises(SettingsError) as error:
        load_index_specs()
    assert "chunkyard.yaml:2" in str(error.value) and "'no-such'" in str(error.value)
    assert "recursive-256" in str(error.value)  # the known names
    _project(root, "collections:\n  mine: [unclosed\n")
    with pytest.raises(SettingsError, match=r"chunkyard\.yaml:\d+: invalid YAML"):
        load_collections()
    _project(root, "colections: {}\n")
    with pytest.raises(SettingsError, match=r"chunkyard\.yaml:1: unknown field"):
        load_collections()


def test_bundled_configs_and_demo_eval_set_are_package_resources() -> None:
    from importlib import resources

    bundled = resources.files("chunkyard.bundled")
    assert bundled.joinpath("indexes.yaml").is_file() and bundled.joinpath("collections.yaml").is_file()
    assert resources.files("chunkyard.evaluation.datasets").joinpath("demo_questions.jsonl").is_file()


@pytest.mark.slow
def test_the_installed_package_works_outside_the_repository(tmp_path: Path) -> None:
    """A wheel built from the tree, installed into a folder: configs and the eval set resolve from
    it, and `chunkyard init` + `add` work in a folder outside the repository."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, "."],
        cwd=REPO_ROOT,
        check=True,
        timeout=300,
    )
    wheel = next(wheels.glob("chunkyard-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "chunkyard/bundled/indexes.yaml",
        "chunkyard/bundled/collections.yaml",
        "chunkyard/evaluation/datasets/demo_questions.jsonl",
    } <= names
    # one top-level package: nothing generic (assets, evaluation, ...) lands in a user's site-packages
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"chunkyard"}, tops
    top_level = next(name for name in names if name.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["chunkyard"]
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel],
        check=True,
        timeout=300,
    )
    work = tmp_path / "elsewhere"
    (work / "notes").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_VARIABLES}
    env["PYTHONPATH"] = str(site)  # ahead of the editable checkout
    probe = (
        "import chunkyard, chunkyard.evaluation.datasets as d, importlib.resources as r;"
        "from chunkyard.retrieval.settings.project import bundled_configs_dir;"
        "print(chunkyard.__file__); print(bundled_configs_dir());"
        "print(r.files(d).joinpath('demo_questions.jsonl').is_file())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0].startswith(str(site)) and out[1].startswith(str(site)) and out[2] == "True"
    cli = [sys.executable, "-m", "chunkyard.orchestration.cli"]
    for argv in (["init"], ["add", "mine", "notes"]):
        done = subprocess.run([*cli, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert "mine:" in (work / "chunkyard.yaml").read_text()


def test_add_picks_minilm_for_an_english_folder_and_the_multilingual_model_otherwise(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """`chunkyard add` without --index: recursive-256 (MiniLM) where the folder is English only,
    recursive-256-multilingual (multilingual-e5-small) where it is not (benchmarks/results/languages.md)."""
    import shutil

    from chunkyard.orchestration.project_file import add_collection, init_project

    root = tmp_path / "proj"
    init_project(root)
    clean_env.chdir(root)
    data = REPO_ROOT / "tests" / "data" / "multilingual"
    shutil.copytree(data / "en", root / "english")
    shutil.copytree(data / "en", root / "mixed" / "en")
    shutil.copytree(data / "uk", root / "mixed" / "uk")
    assert add_collection(root, "english", ["english"])[0]["indexes"] == ["recursive-256"]
    assert add_collection(root, "mixed", ["mixed"])[0]["indexes"] == ["recursive-256-multilingual"]
    assert add_collection(root, "pinned", ["mixed"], indexes=["token-256"])[0]["indexes"] == ["token-256"]
    assert load_index_configs()["recursive-256-multilingual"].embedding_model == "multilingual-e5-small"
