"""`chunkyard init` and `chunkyard add`: write a project's chunkyard.yaml (and nothing else)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from chunkyard.orchestration.model_choice import ModelChoice, choose_index, folder_languages
from chunkyard.retrieval.settings.config import SettingsError, load_collections, load_index_configs
from chunkyard.retrieval.settings.names import is_valid_name
from chunkyard.retrieval.settings.project import PROJECT_FILE, STATE_DIR, read_project

HEADER = """\
# A chunkyard project. `chunkyard add NAME FOLDER` adds a collection here;
# `chunkyard index` builds it; `chunkyard search "..."`, `chunkyard serve` (API on :8000) and
# `chunkyard ui` (Dagster on :3000) work on it. Local state lives in .chunkyard/ beside this file.
# `indexes:` may add index configs (or replace bundled ones by name); `benchmarks: true` adds the
# bundled benchmark collections (chroma_general). `chunkyard check` checks every field (file:line and
# the allowed values), `chunkyard configs` lists the index configs, `chunkyard eval --help` shows the
# eval-set format; `chunkyard --help` lists the commands.
"""


# Every file: a type the loaders cannot read is reported as skipped, with the supported types.
DEFAULT_INCLUDE = ("**/*",)


def init_project(folder: Path) -> Path:
    """Make `folder` a project: chunkyard.yaml with no collections yet, and an ignored state folder."""
    folder = folder.expanduser().resolve()
    path = folder / PROJECT_FILE
    if path.exists():
        raise SettingsError(
            f"{path}: already a chunkyard project; add documents with `chunkyard add NAME FOLDER`"
        )
    if folder.exists() and not folder.is_dir():
        raise SettingsError(f"{folder}: not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + yaml.safe_dump({"collections": {}}, sort_keys=False), encoding="utf-8")
    state = folder / STATE_DIR
    state.mkdir(exist_ok=True)
    (state / ".gitignore").write_text("*\n", encoding="utf-8")
    return path


def add_collection(
    root: Path,
    name: str,
    folders: list[str],
    *,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    indexes: list[str] | None = None,
    replace: bool = False,
    eval_set: str | None = None,
) -> tuple[dict[str, Any], ModelChoice | None]:
    """Write collection `name` into the project's chunkyard.yaml; its entry, and the model chosen for
    its languages when `indexes` names none. The folders must exist; those inside the project are
    written relative to it, so the project can move."""
    if not is_valid_name(name):
        raise SettingsError(f"collection name {name!r}: use lowercase letters, digits, '-', '_' or '.'")
    paths = []
    for folder in folders:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise SettingsError(f"{folder}: not a folder (chunkyard add takes folders of documents)")
        paths.append(str(path.relative_to(root)) if path.is_relative_to(root) else str(path))
    questions = _eval_set_path(root, eval_set) if eval_set else None
    known = load_index_configs()
    choice = None if indexes else choose_index(folder_languages(paths_of(root, paths), include, exclude))
    wanted = list(indexes) if indexes else [choice.config] if choice else []
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise SettingsError(f"--index {unknown[0]}: unknown index config; known: {', '.join(sorted(known))}")
    raw = read_project(root)
    collections = dict(raw.get("collections") or {})
    if "collections" not in raw:
        # the project used the bundled collections: keep them, now written out
        collections = {n: _entry_of(c) for n, c in load_collections().items()}
    if name in collections and not replace:
        raise SettingsError(
            f"{root / PROJECT_FILE}: collection {name!r} exists already; pass --replace to overwrite it"
        )
    entry: dict[str, Any] = {"folders": paths, "include": list(include or DEFAULT_INCLUDE)}
    if exclude:
        entry["exclude"] = list(exclude)
    if questions:
        entry["eval_set"] = questions
    entry["indexes"] = wanted
    collections[name] = entry
    _write(root, {**{k: v for k, v in raw.items() if k != "collections"}, "collections": collections})
    return entry, choice


EVAL_SET_SUFFIXES = (".jsonl", ".yaml", ".yml")


def _eval_set_path(root: Path, eval_set: str) -> str:
    """`--eval-set FILE` as chunkyard.yaml records it (relative to the project when inside it)."""
    path = Path(eval_set).expanduser().resolve()
    if not path.is_file():
        raise SettingsError(
            f"--eval-set {eval_set}: not a file (JSON Lines or YAML questions: `chunkyard eval --help`)"
        )
    if path.suffix.lower() not in EVAL_SET_SUFFIXES:
        raise SettingsError(
            f"--eval-set {eval_set}: expected a {', '.join(EVAL_SET_SUFFIXES)} file of questions "
            "(`chunkyard eval --help` shows the format)"
        )
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def paths_of(root: Path, paths: list[str]) -> list[Path]:
    return [Path(p) if Path(p).is_absolute() else root / p for p in paths]


def set_eval_set(root: Path, name: str, eval_set: str) -> dict[str, Any]:
    """Point collection `name` of the project's chunkyard.yaml at `eval_set`; its entry."""
    raw = read_project(root)
    collections = dict(raw.get("collections") or {})
    if "collections" not in raw:
        collections = {n: _entry_of(c) for n, c in load_collections().items()}
    if name not in collections:
        raise SettingsError(f"{root / PROJECT_FILE}: no collection {name!r} to set eval_set on")
    entry = {**dict(collections[name]), "eval_set": eval_set}
    collections[name] = entry
    _write(root, {**{k: v for k, v in raw.items() if k != "collections"}, "collections": collections})
    return entry


def _entry_of(collection: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for key in ("description", "folders", "include", "exclude", "dataset", "eval_set", "indexes"):
        value = getattr(collection, key)
        if value:
            entry[key] = list(value) if isinstance(value, tuple) else value
    return entry


def _write(root: Path, data: dict[str, Any]) -> None:
    """Rewrite chunkyard.yaml keeping its leading comment block (later comments are not kept)."""
    path = root / PROJECT_FILE
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = "".join(line for line in _leading_comments(lines))
    plain = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    text = header + yaml.safe_dump(_plain(plain), sort_keys=False, default_flow_style=None, width=100)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _leading_comments(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if not line.startswith("#"):
            break
        out.append(line)
    return out


def _plain(value: Any) -> Any:
    """Plain dicts and lists (yaml.safe_dump refuses the line-remembering mapping type)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
