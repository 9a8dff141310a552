"""An LLM's own Hugging Face `tokenizer.json` (Llama 3, Qwen, Mistral) as a Tokenizer of its prompt's tokens."""

from __future__ import annotations

import functools
from pathlib import Path


class TokenizerFile:
    """Counts a text's tokens as the LLM's tokenizer encodes it into a prompt (no special tokens added)."""

    def __init__(self, name: str, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises a bare Exception for a bad file
            raise ValueError(f"{name}: {path} is not a Hugging Face tokenizer.json ({exc})") from exc
        self._tok.no_truncation()
        self._tok.no_padding()
        self.name = name
        self.path = path

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Each token's characters, in order; tokens that share characters (byte-level pieces of one
        character) are merged, so the spans never overlap."""
        spans: list[tuple[int, int]] = []
        for start, end in self._tok.encode(text, add_special_tokens=False).offsets:
            if spans and start < spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            elif end > start:
                spans.append((start, end))
        return spans


def tokenizer_file(name: str, path: Path) -> TokenizerFile:
    """`TokenizerFile(name, path)`, loaded once per file version in this process."""
    stat = path.stat()
    return _loaded(name, path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _loaded(name: str, path: Path, mtime_ns: int, size: int) -> TokenizerFile:
    return TokenizerFile(name, path)
