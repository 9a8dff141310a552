"""Which embedding model suits a folder's languages: `chunkyard add`'s choice, with its reason, and `check`'s warning."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chunkyard.retrieval.settings.names import DEFAULT_CONFIG

# A folder that is not English only gets the multilingual model instead (benchmarks/results/languages.md).
MULTILINGUAL_INDEX = "recursive-256-multilingual"
ENGLISH_ONLY_SHARE = 0.95  # of the folder's text, by detected language
# Models trained on English text only: on other languages their vectors rank poorly (languages.md).
ENGLISH_ONLY_MODELS = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})


@dataclass(frozen=True)
class ModelChoice:
    """The index config `chunkyard add` picks for a folder, and why (the language shares it measured)."""

    config: str
    shares: dict[str, float]

    @property
    def english(self) -> float:
        return self.shares.get("en", 1.0 if not self.shares else 0.0)

    @property
    def reason(self) -> str:
        if not self.shares:
            return f"no prose to measure a language in, so the English default {DEFAULT_CONFIG}"
        measured = shares_text(self.shares)
        if self.config == MULTILINGUAL_INDEX:
            return (
                f"the folder's text is {measured}: less than {ENGLISH_ONLY_SHARE:.0%} English, so the "
                f"multilingual model (multilingual-e5-small, about 100 languages); --index {DEFAULT_CONFIG} "
                "keeps the English one"
            )
        return f"the folder's text is {measured}, so the English model (all-MiniLM-L6-v2)"


def shares_text(shares: dict[str, float], most: int = 4) -> str:
    """`62% es, 21% uk, 17% en`: the largest shares, in plain words."""
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    text = ", ".join(f"{share:.0%} {language}" for language, share in ranked[:most])
    return text + (f" and {len(ranked) - most} more" if len(ranked) > most else "")


def choose_index(shares: dict[str, float]) -> ModelChoice:
    """MiniLM's recursive-256 for an English-only folder (or one with no prose), else the multilingual model's."""
    english = shares.get("en", 1.0 if not shares else 0.0)
    return ModelChoice(DEFAULT_CONFIG if english >= ENGLISH_ONLY_SHARE else MULTILINGUAL_INDEX, dict(shares))


def folder_languages(
    folders: list[Path], include: list[str] | None, exclude: list[str] | None
) -> dict[str, float]:
    """Each detected language's share of the folders' text (py3langid per document, as `analyzer: auto`)."""
    from chunkyard.chunking.documents.folder import load_folder
    from chunkyard.retrieval.lexical.languages import choose_analyzer, document_language

    text_by_language: dict[str, int] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        documents, _ = load_folder(folder, list(include or ("**/*",)), list(exclude or []))
        for document in documents:
            language = document_language(document)
            text_by_language[language] = text_by_language.get(language, 0) + len(document.text)
    return choose_analyzer(text_by_language)[1]


def language_warning(collection: str, config: str, model: str, shares: dict[str, float]) -> str | None:
    """A warning when an English-only model indexes a folder that is not English, else None."""
    english = shares.get("en", 1.0 if not shares else 0.0)
    if model not in ENGLISH_ONLY_MODELS or english >= ENGLISH_ONLY_SHARE:
        return None
    return (
        f"{collection}/{config}: embedded by {model}, an English-only model, but the folder's text is "
        f"{shares_text(shares)}; set `embedding_model: multilingual-e5-small` on the config "
        f"(or use {MULTILINGUAL_INDEX})"
    )
