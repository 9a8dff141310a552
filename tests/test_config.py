"""Settings files: every shipped index config loads and pairs up; a bad entry is refused with the file, entry and field named."""

from pathlib import Path

import pytest
from chunkyard.retrieval.settings.config import SettingsError, load_index_configs
from chunkyard.retrieval.settings.config_checks import load_index_specs


def test_shipped_configs_load_and_pair_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKYARD_BENCHMARKS", "1")  # chroma_general is a benchmark collection
    names = {spec.name for spec in load_index_specs()}
    assert {"demo/token-256", "demo/recursive-256", "chroma_general/chroma-token-250-0"} <= names


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("chunker: {strategy: token, size: 64}\n    colour: red", "unknown field(s) ['colour']"),
        ("chunker: {size: 64}", "chunker: must be a mapping with a `strategy`"),
        (
            "chunker: {strategy: token, size: 64}\n    allow_truncation: maybe",
            "allow_truncation: must be true",
        ),
        (
            "chunker: {strategy: token, size: 64}\n    hybrid: {fusion: rrf}",
            "hybrid: unknown field(s) ['fusion']",
        ),
    ],
)
def test_bad_index_config_names_the_field(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "indexes.yaml"
    path.write_text(f"indexes:\n  small:\n    {entry}\n", encoding="utf-8")
    with pytest.raises(SettingsError) as error:
        load_index_configs(path)
    assert "indexes.small" in str(error.value) and message in str(error.value)


def test_missing_settings_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="settings file not found"):
        load_index_configs(tmp_path / "nope.yaml")


def test_loaded_configs_dump_back_as_plain_yaml() -> None:
    """Configs keep their line marks for errors, yet `yaml.safe_dump` writes them (chunkyard add, benchmarks)."""
    import yaml

    config = load_index_configs()["recursive-256"]
    assert yaml.safe_load(yaml.safe_dump(config.as_dict()))["chunker"] == dict(config.chunker)
