"""py3langid's identifier with its byte walk in numpy: the same features and scores, ~10x faster.

py3langid counts its n-gram features by walking a DFA over the text's UTF-8 bytes in a Python loop,
about 8 ms for a 12,000-character document: most of `stage_chunks` on a first build. In its model
(py3langid 0.4.0, pinned) the state after any text is the state after its last WINDOW bytes alone
(tests/test_language_identifier.py proves it over the automaton), so every byte's state is computed
at once, WINDOW numpy steps over the whole text. The features are then counted in the order of their
first occurrence, as the loop's Counter holds them, and scored by py3langid's own code, so the
scores are bit for bit the library's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

WINDOW = 6  # bytes that determine the model's DFA state (its longest n-gram)


class WindowedIdentifier(LanguageIdentifier):
    """A py3langid LanguageIdentifier whose feature counts come from a vectorized DFA walk."""

    __slots__ = ("_moves", "_outputs", "_row_offsets")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._moves = np.frombuffer(self.tk_nextmove, dtype=np.uint32)  # the library's table, not copied
        self._row_offsets = np.asarray(self._rowbase, dtype=np.int64)
        self._outputs = np.asarray(self.tk_output, dtype=np.int64)

    def feature_counts(self, data: bytes) -> dict[int, int]:
        """{feature: count} over `data`'s bytes, in first-occurrence order (py3langid's visit_counts)."""
        text = np.frombuffer(data, dtype=np.uint8)
        states = np.zeros(len(text), dtype=np.uint32)
        # every position walks its last WINDOW bytes from the root (a text shorter than that: all of it)
        for back in range(min(WINDOW, len(text)) - 1, -1, -1):
            moves = self._row_offsets[states[back:]]
            moves += text[: len(text) - back]
            states[back:] = self._moves.take(moves)
        features = self._outputs.take(states)
        features = features[features >= 0]
        found, first, counts = np.unique(features, return_index=True, return_counts=True)
        order = np.argsort(first)  # distinct positions: any sort gives the one order
        return dict(zip(found[order].tolist(), counts[order].tolist(), strict=True))

    def _raw_score(self, text: bytes) -> np.ndarray:
        visits = self.feature_counts(text)
        if not visits:  # the library's answer for featureless text
            return super()._raw_score(text)
        return self._sparse_score(visits, self.nb_ptc)


def load_identifier() -> WindowedIdentifier:
    """The identifier over all of py3langid's 97 languages, probabilities normalized (loads in ~1 s)."""
    return WindowedIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
