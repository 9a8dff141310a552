"""The chunkyard project: the folder holding chunkyard.yaml, found like git's, and its settings files.

Everything here is below the rest of `retrieval`: the database, the settings and the CLI all ask it
where the project is, so it imports nothing else of the project.
"""

from __future__ import annotations

import copy
import os
import re
import time
from pathlib import Path
from typing import Any

import yaml


class SettingsError(ValueError):
    """A settings file (the project file, indexes.yaml, collections.yaml) or an entry in one is invalid;
    the message names the file, entry and field."""


PROJECT_FILE = "chunkyard.yaml"
STATE_DIR = ".chunkyard"
PROJECT_ENV = "CHUNKYARD_PROJECT"
LEGACY_PROJECT_ENV = "CHUNKYARD_PROJECT_DIR"  # the older name, still read
BENCHMARKS_ENV = "CHUNKYARD_BENCHMARKS"
AUTOMATION_ENV = "CHUNKYARD_AUTOMATION"  # "0": the document sensor and automation start stopped
_PROJECT_KEYS = {
    "collections",
    "indexes",
    "benchmarks",
    "description",
    "ui_automation",
    "default_index",
    "llm_tokenizers",
}
# The name a request gives one of the project's `llm_tokenizers`: never a path (a request must not name
# a file of the server), so letters, digits, ".", "_" and "-".
LLM_TOKENIZER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ProjectError(SettingsError):
    """No chunkyard project where one is needed; the message says how to make or name one."""


def find_project(start: Path | None = None) -> Path | None:
    """The project folder: CHUNKYARD_PROJECT if set, else the nearest folder with a chunkyard.yaml
    from `start` (the current directory) up, as git and dbt look; None when there is none."""
    named = os.environ.get(PROJECT_ENV) or os.environ.get(LEGACY_PROJECT_ENV)
    if named:
        root = Path(named).expanduser().resolve()
        if root.name == PROJECT_FILE and root.is_file():
            root = root.parent
        if not (root / PROJECT_FILE).is_file():
            variable = PROJECT_ENV if os.environ.get(PROJECT_ENV) else LEGACY_PROJECT_ENV
            raise ProjectError(
                f"{root}: not a chunkyard project (no {PROJECT_FILE}), named by --project or {variable}; "
                f"run `chunkyard init {root}` or name the folder that holds {PROJECT_FILE}"
            )
        return root
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def project_root() -> Path:
    """The current project's folder; ProjectError (with the fix) outside a project."""
    root = find_project()
    if root is None:
        raise ProjectError(
            f"not in a chunkyard project: no {PROJECT_FILE} in {Path.cwd()} or any folder above it; "
            f"run `chunkyard init` to make this folder one, or pass --project DIR (or set {PROJECT_ENV})"
        )
    return root


def bundled_configs_dir() -> Path:
    """The settings files shipped with the package (`configs/` of the repository, installed as the package
    `chunkyard.bundled`): the index configs every project starts from, and the bundled collections."""
    from importlib import resources

    try:
        return Path(str(resources.files("chunkyard.bundled")))
    except ModuleNotFoundError:  # a source tree on sys.path without an install
        return Path(__file__).resolve().parent.parent / "configs"


def configs_dir() -> Path:
    """Where indexes.yaml and collections.yaml are read: CHUNKYARD_CONFIGS (a folder holding both,
    used as they stand), else the bundled ones (which the project's chunkyard.yaml adds to)."""
    env = os.environ.get("CHUNKYARD_CONFIGS")
    return Path(env).resolve() if env else bundled_configs_dir()


def project_file() -> Path:
    return project_root() / PROJECT_FILE


def read_project(root: Path | None = None) -> dict[str, Any]:
    """The project's chunkyard.yaml, checked at the top level (its entries are checked where used)."""
    path = (root or project_root()) / PROJECT_FILE
    raw = read_yaml(path)
    unknown = set(raw) - _PROJECT_KEYS
    if unknown:
        raise SettingsError(
            f"{at_line(path, raw, sorted(unknown)[0])}: unknown field(s) {sorted(unknown)}; "
            f"allowed {sorted(_PROJECT_KEYS)}"
        )
    for key in ("collections", "indexes"):
        if key in raw and not isinstance(raw[key] if raw[key] is not None else {}, dict):
            raise SettingsError(f"{at_line(path, raw, key)}: `{key}` must be a mapping of names")
    for key in ("benchmarks", "ui_automation"):
        if key in raw:
            as_bool(raw[key], f"{at_line(path, raw, key)}: {key}")
    return raw


def llm_tokenizer_files(reserved: tuple[str, ...] = (), root: Path | None = None) -> dict[str, Path]:
    """The project's own LLM tokenizers (`llm_tokenizers:` in chunkyard.yaml): each name and its
    Hugging Face `tokenizer.json` (a path relative to the project folder, or a folder holding one).
    {} outside a project; `reserved` names (the built-in encodings) may not be taken."""
    root = root or find_project()
    if root is None:
        return {}
    path = root / PROJECT_FILE
    raw = read_project(root)
    entries = raw.get("llm_tokenizers") or {}
    if not isinstance(entries, dict):
        raise SettingsError(
            f"{at_line(path, raw, 'llm_tokenizers')}: `llm_tokenizers` must map names to tokenizer.json files"
        )
    files: dict[str, Path] = {}
    for name, value in entries.items():
        where = f"{at_line(path, entries, name)}: llm_tokenizers.{name}"
        if not isinstance(name, str) or not LLM_TOKENIZER_NAME.fullmatch(name):
            raise SettingsError(f"{where}: a name is letters, digits, '.', '_' or '-' (at most 64)")
        if name in reserved:
            raise SettingsError(f"{where}: {name} is built in; give the file another name")
        if not isinstance(value, str) or not value.strip():
            raise SettingsError(
                f"{where}: must be the path of a tokenizer.json, or of the folder holding one"
            )
        file = (root / value).expanduser()
        file = file / "tokenizer.json" if file.is_dir() else file
        if not file.is_file():
            raise SettingsError(
                f"{where}: {file} not found (a Hugging Face tokenizer.json, e.g. the LLM's own)"
            )
        files[name] = file.resolve()
    return files


def benchmarks_enabled(project: dict[str, Any] | None = None) -> bool:
    """Benchmark collections (`benchmark: true`, e.g. chroma_general) are built only when asked:
    CHUNKYARD_BENCHMARKS=1 (`--with-benchmarks`) or `benchmarks: true` in chunkyard.yaml."""
    env = os.environ.get(BENCHMARKS_ENV, "").strip().lower()
    if env:
        return env in ("1", "true", "yes", "on")
    return bool((project or {}).get("benchmarks", False))


def ui_automation(project: dict[str, Any]) -> bool:
    """Whether `chunkyard ui` runs the document sensor and automation (`ui_automation: true`); off by
    default, so opening the UI does not start indexing on its own."""
    return bool(project.get("ui_automation", False))


def automation_enabled() -> bool:
    """Whether the code location starts the document sensor and automation running: yes, unless the
    process that loads it says no (CHUNKYARD_AUTOMATION=0, as `chunkyard ui` does by default)."""
    return os.environ.get(AUTOMATION_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def at_line(path: Path, mapping: Any, key: Any) -> str:
    """`file:line` of `key` in a mapping read by `_read_yaml` (just the file when unknown)."""
    line = getattr(mapping, "lines", {}).get(key)
    return f"{path}:{line}" if line else str(path)


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{where}: must be true or false, got {value!r}")
    return value


class _Mapping(dict):
    """A YAML mapping that remembers the line of each key (`lines`), for errors that say where."""

    lines: dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """yaml.safe_load whose mappings are `_Mapping`s (1-based key lines from the node marks)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> _Mapping:  # type: ignore[override]
        mapping = _Mapping(super().construct_mapping(node, deep=True))
        mapping.lines = {}
        for key_node, _value in node.value:
            try:
                mapping.lines[self.construct_object(key_node)] = key_node.start_mark.line + 1
            except TypeError:  # an unhashable key; the mapping construction has refused it already
                continue
        return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)
# Settings files read here are written back out (`chunkyard add`, benchmarks' generated ones): a
# `_Mapping` dumps as the plain mapping it is, line marks left behind.
yaml.SafeDumper.add_representer(_Mapping, yaml.representer.SafeRepresenter.represent_dict)


# A settings file parsed once per process while it stays unchanged: `chunkyard index` checks the
# project, then builds its Dagster definitions and its steps from the same files, each read once.
# A parse is reused only when the file's stat is the same and its last change is older than
# SETTLED_S before the parse (git's "racily clean" rule): a file rewritten within one tick of the
# clock, same size, is read again.
SETTLED_S = 1.0
# path -> (its stat when parsed: mtime, ctime, size, inode; the parse)
ParsedFiles = dict[Path, tuple[tuple[int, int, int, int], dict[str, Any]]]
_parsed: ParsedFiles = {}


def parsed_files() -> ParsedFiles:
    """The settings files this process has parsed and may reuse: what it hands a process it starts."""
    return dict(_parsed)


def reuse_parsed(files: ParsedFiles) -> None:
    """Take over another process's parses (`parsed_files`); each serves `read_yaml` only while its
    file's stat is still the one it was parsed at, as this process's own do."""
    for path, entry in files.items():
        _parsed.setdefault(path, entry)


def read_yaml(path: Path) -> dict[str, Any]:
    """A settings file's top-level mapping (mappings remember their key lines); a fresh copy each call."""
    if not path.is_file():
        raise SettingsError(f"settings file not found: {path}")
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
    cached = _parsed.get(path)
    if cached is not None and cached[0] == stamp:
        return copy.deepcopy(cached[1])
    started = time.time_ns()
    data = _parse_yaml(path)
    if max(stat.st_mtime_ns, stat.st_ctime_ns) < started - int(SETTLED_S * 1e9):
        _parsed[path] = (stamp, copy.deepcopy(data))
    return data


def _parse_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader) or {}  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SettingsError(f"{where}: invalid YAML: {problem}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: top level must be a mapping")
    return data
