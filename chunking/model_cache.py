"""The per-machine model cache: each derived model is built once per machine, under a lock, atomically.

Exports (ONNX), distillations (static tier) and rebuilt models (multilingual-e5-small) are large and
slow to make, so every project on a machine shares one folder: platformdirs' user cache directory
(`~/.cache/chunkyard/models` on Linux), or CHUNKYARD_MODEL_DIR. A build runs under a file lock (a
second process waits for it instead of building the same model again), is written into a staging
folder, verified, marked ready and only then renamed into place, so a crash or a full disk never
leaves a half-written model that later runs would load.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

MODEL_DIR_ENV = "CHUNKYARD_MODEL_DIR"
# Written last into a verified build: a folder without it is incomplete and is built again.
READY = "chunkyard-ready"
# The libraries a build runs whose log lines and warnings are meant for their developers, not ours.
LIBRARY_LOGGERS = ("sentence_transformers", "transformers", "optimum", "torch", "onnxruntime", "model2vec")

log = logging.getLogger("chunkyard.models")
T = TypeVar("T")


def model_cache_dir() -> Path:
    """CHUNKYARD_MODEL_DIR, else the user cache directory's `chunkyard/models`."""
    env = os.environ.get(MODEL_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("chunkyard")) / "models"


def folder_digest(folder: str | Path) -> str:
    """A short digest naming a model folder by content, not by path: every file's relative path and
    size plus the bytes of its small files (configs, vocabularies). The same model installed in two
    virtualenvs shares one cache entry; a changed model gets a new one."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(root).as_posix()}\0{size}\0".encode())
        if size <= 1 << 20:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@contextlib.contextmanager
def library_output_to_log() -> Iterator[None]:
    """Send the libraries' warnings and log lines to the `chunkyard.models` log (DEBUG), not the terminal.

    An export prints "No 'model.onnx' found", a TracerWarning, a `torch_dtype` deprecation and a
    suggestion to `save_pretrained` into site-packages: none of it is for chunkyard's user.
    """
    if importlib.util.find_spec("transformers") is not None:
        # transformers adds its own stderr handler on first use: let it, so that the swap below sticks
        from transformers.utils import logging as transformers_logging

        transformers_logging.get_logger()
    forward = _Forward()
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers, logger.propagate = [forward], False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        for warning in caught:
            log.debug("%s: %s", warning.category.__name__, warning.message)
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


class _Forward(logging.Handler):
    """Re-logs a library's record on the `chunkyard.models` logger at DEBUG."""

    def emit(self, record: logging.LogRecord) -> None:
        log.debug("%s: %s", record.name, record.getMessage())


def build_once(target: Path, build: Callable[[Path], None], load: Callable[[Path], T], what: str) -> T:
    """The model in `target`, opened by `load`; built first by `build(staging)` when it is missing,
    unfinished or unusable.

    `load` must raise on a folder it cannot use (it is the verification too). The build runs under a
    lock file beside `target`, so concurrent processes build it once; the others wait and load it.
    A ready folder that no longer loads (a file truncated afterwards) is rebuilt with a warning.
    """
    loaded, error = _try_load(target, load)
    if error is None and loaded is not None:
        return loaded
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(f"{target.name}.lock"))):
        loaded, error = _try_load(target, load)  # another process may have built it meanwhile
        if error is None and loaded is not None:
            return loaded
        if error is not None:
            warnings.warn(
                f"{what} in the model cache {target} is unusable ({type(error).__name__}: {error}); "
                "rebuilding it",
                stacklevel=3,
            )
        _build_atomically(target, build, load, what)
    return load(target)


def _try_load(target: Path, load: Callable[[Path], T]) -> tuple[T | None, Exception | None]:
    """(model, None) for a ready folder that loads, (None, error) for one that does not, else (None, None)."""
    if not (target / READY).is_file():
        return None, None
    try:
        return load(target), None
    except Exception as exc:  # onnxruntime, safetensors and tokenizers raise their own types
        return None, exc


def _build_atomically(
    target: Path, build: Callable[[Path], None], load: Callable[[Path], T], what: str
) -> None:
    """Build into a staging folder, verify with `load`, mark ready, then swap it in for `target`."""
    tag = f"{os.getpid()}-{threading.get_ident()}"
    staging = target.with_name(f"{target.name}.tmp-{tag}")
    retired = target.with_name(f"{target.name}.old-{tag}")
    shutil.rmtree(staging, ignore_errors=True)
    log.info("building %s into %s (once per machine)", what, target)
    try:
        staging.mkdir(parents=True)
        build(staging)
        load(staging)  # raises if a file is unusable
        (staging / READY).write_text(f"{what}\n", encoding="utf-8")
        if target.exists():
            target.rename(retired)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(retired, ignore_errors=True)
