"""SQuAD v1.1-format JSON (title, paragraphs, context, qas with answer text and answer_start)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets.types import Dataset, DatasetError, Question, Span, validate_spans

PARAGRAPH_SEPARATOR = "\n\n"
SQUAD_DOCUMENT_MODES = ("paragraphs", "articles")


def _slug(title: str) -> str:
    slug = re.sub(r"\s+", "_", title.strip())
    return slug or "untitled"


def load_squad(path: str | Path, *, documents: str = "paragraphs", name: str | None = None) -> Dataset:
    """Documents are paragraphs (`<title>#<n>`), or whole articles (`<title>`) with paragraphs
    joined by a blank line and every answer offset shifted by its paragraph's position.

    Each distinct answer of a question is an alternative reference set (SQuAD dev questions
    carry several annotators' answers); the first is the primary one. An answer whose
    `answer_start` does not point at its text is re-located inside its paragraph (nearest
    occurrence) and reported; one that cannot be found is dropped and reported.
    """
    if documents not in SQUAD_DOCUMENT_MODES:
        raise DatasetError(f"squad documents: expected one of {SQUAD_DOCUMENT_MODES}, got {documents!r}")
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DatasetError(f"SQuAD file not found: {path}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid UTF-8 JSON: {exc}") from exc
    articles = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(articles, list):
        raise DatasetError(f"{path}: expected a SQuAD object with a `data` list of articles")

    docs: list[Document] = []
    questions: list[Question] = []
    problems: list[str] = []
    used_titles: dict[str, int] = {}
    for article_number, article in enumerate(articles):
        where = f"{path}: data[{article_number}]"
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{where}: needs a `paragraphs` list")
        title = str(article.get("title") or f"article-{article_number}")
        base_id = _slug(title)
        if base_id in used_titles:  # two articles with one title must still get distinct ids
            used_titles[base_id] += 1
            base_id = f"{base_id}~{used_titles[base_id]}"
        else:
            used_titles[base_id] = 0

        article_texts: list[str] = []
        offset = 0
        for paragraph_number, paragraph in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{paragraph_number}]"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str):
                raise DatasetError(f"{pwhere}: needs a string `context`")
            if documents == "paragraphs":
                doc_id, shift = f"{base_id}#{paragraph_number}", 0
                docs.append(
                    Document(id=doc_id, text=context, title=title, metadata={"paragraph": paragraph_number})
                )
            else:
                if article_texts:
                    offset += len(PARAGRAPH_SEPARATOR)
                doc_id, shift = base_id, offset
                article_texts.append(context)
            for qa_number, qa in enumerate(paragraph.get("qas") or []):
                question = _question(
                    qa, context, doc_id, shift, title, f"{pwhere}.qas[{qa_number}]", problems
                )
                if question is not None:
                    questions.append(question)
            if documents == "articles":
                offset += len(context)
        if documents == "articles":
            docs.append(Document(id=base_id, text=PARAGRAPH_SEPARATOR.join(article_texts), title=title))

    validate_spans(questions, docs, source=str(path))
    return Dataset(name or path.stem, docs, questions, problems)


def _question(
    qa: Any, context: str, doc_id: str, shift: int, title: str, where: str, problems: list[str]
) -> Question | None:
    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
        raise DatasetError(f"{where}: needs a string `question`")
    qid = str(qa.get("id") or where)
    spans: list[Span] = []
    for answer in qa.get("answers") or []:
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text or not isinstance(start, int):
            problems.append(f"{where}: answer without text/answer_start skipped")
            continue
        if context[start : start + len(text)] != text:
            found = [m.start() for m in re.finditer(re.escape(text), context)]
            if not found:
                problems.append(f"{where} ({qid}): answer {text[:40]!r} not in its paragraph; skipped")
                continue
            nearest = min(found, key=lambda s: abs(s - start))
            problems.append(f"{where} ({qid}): answer_start {start} re-located to {nearest}")
            start = nearest
        span = Span(doc_id, start + shift, start + shift + len(text))
        if span not in spans:
            spans.append(span)
    if not spans:
        problems.append(f"{where} ({qid}): no locatable answer (unanswerable?); question skipped")
        return None
    return Question(
        id=qid,
        text=qa["question"],
        references=[spans[0]],
        corpus=title,
        alternatives=tuple((s,) for s in spans[1:]),
    )
