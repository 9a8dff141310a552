"""`chunkyard index` reads each settings file once: the check, the definitions and the steps share one parse."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
from chunkyard.retrieval.settings import project

from tests.cli_helpers import STATE_VARIABLES
from tests.test_config_checks import COLLECTION, INDEX


@pytest.fixture
def settled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose chunkyard.yaml was last written a minute ago, as on any `chunkyard index`."""
    for name in STATE_VARIABLES:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    (tmp_path / "chunkyard.yaml").write_text(COLLECTION + INDEX)
    past = time.time() - 60
    os.utime(tmp_path / "chunkyard.yaml", (past, past))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHUNKYARD_PROJECT", str(tmp_path))
    monkeypatch.setattr(project, "_parsed", {})
    # utime moved the inode's ctime to now, which no call can set back: wait until the file has settled
    time.sleep(project.SETTLED_S + 0.05)
    return tmp_path


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter:
    parses: Counter = Counter()
    parse = project._parse_yaml

    def counted(path: Path):
        parses[path.name] += 1
        return parse(path)

    monkeypatch.setattr(project, "_parse_yaml", counted)
    return parses


def test_the_check_and_the_definitions_of_one_index_parse_each_settings_file_once(
    settled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunkyard.assets.definitions import build_definitions
    from chunkyard.orchestration.cli_check import chosen_collections
    from chunkyard.retrieval.settings.config_checks import check_project

    parses = _counting(monkeypatch)
    chosen = chosen_collections(None)
    check_project(chosen)
    build_definitions(database_url="postgresql://unused")  # what `chunkyard index` builds its run from
    assert chosen == ["mine"]
    assert parses["chunkyard.yaml"] == 1, parses
    assert all(count == 1 for count in parses.values()), parses


def test_an_edited_file_is_read_again_even_within_a_tick(
    settled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunkyard.retrieval.settings.config import load_collections

    file = settled / "chunkyard.yaml"
    assert list(load_collections()) == ["mine"]
    stat = file.stat()
    file.write_text((COLLECTION + INDEX).replace("mine:", "ours:").replace("[mine-64]", "[mine-64]"))
    assert file.stat().st_size == stat.st_size
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: only ctime moved
    assert list(load_collections()) == ["ours"]
    # and one written just now is never trusted from a cache: each read parses it again
    parses = _counting(monkeypatch)
    file.write_text(COLLECTION + INDEX)
    load_collections()
    load_collections()
    assert parses["chunkyard.yaml"] == 2
