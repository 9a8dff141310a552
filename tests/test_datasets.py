"""Dataset loaders on small hand-made fixtures (and the real Chroma data when present)."""

from __future__ import annotations

import csv
import json

import pytest
from chunkyard.chunking.types import Document
from chunkyard.evaluation.datasets import (
    CHROMA_CORPORA,
    DatasetError,
    Span,
    load_chroma_general,
    load_dataset,
    load_eval_set,
    load_squad,
    read_eval_set,
)

from tests.conftest import CHROMA_DIR, requires_chroma

DOCS = [
    Document(
        "guide/a.md", "Postgres stores chunks. Postgres also stores vectors.\nThe cache is keyed by hash."
    ),
    Document("b.md", "BM25 ranks words.\nHybrid   fusion\nmixes both."),
]


def _fake_chroma(folder, rows):
    folder.mkdir()
    for corpus in CHROMA_CORPORA:
        (folder / f"{corpus}.md").write_text(f"{corpus} text. Repeat me. Repeat me. End.", encoding="utf-8")
    with (folder / "questions_df.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        writer.writerows(rows)
    return folder


def _ref(text, start, end):
    return {"content": text[start:end], "start_index": start, "end_index": end}


def test_span_validation():
    with pytest.raises(DatasetError, match="start <= end"):
        Span("a", 5, 3)
    with pytest.raises(DatasetError, match="start <= end"):
        Span("a", -1, 3)
    assert Span("a", 2, 7).length == 5


def test_chroma_loader_on_a_fixture(tmp_path):
    text = "chatlogs text. Repeat me. Repeat me. End."
    folder = _fake_chroma(
        tmp_path / "chroma_general",
        [
            ["What repeats?", json.dumps([_ref(text, 15, 25)]), "chatlogs"],
            ["How does it end?", json.dumps([_ref(text, 37, 41), _ref(text, 0, 8)]), "chatlogs"],
        ],
    )
    dataset = load_chroma_general(folder)
    assert [d.id for d in dataset.documents] == list(CHROMA_CORPORA)
    assert [q.id for q in dataset.questions] == ["chatlogs-000", "chatlogs-001"]
    assert dataset.questions[1].references == [Span("chatlogs", 37, 41), Span("chatlogs", 0, 8)]
    assert dataset.questions[0].corpus == "chatlogs" and dataset.questions[0].alternatives == ()
    assert dataset.problems == []
    # The repeated passage: its second occurrence becomes an alternative reference set.
    expanded = load_chroma_general(folder, duplicates="alternatives")
    assert expanded.questions[0].alternatives == ((Span("chatlogs", 26, 36),),)
    assert expanded.questions[1].alternatives == ()
    # CHUNKYARD_DATA points load_dataset at the folder's parent.
    assert len(load_dataset(folder).questions) == 2


def test_chroma_loader_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKYARD_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match="CHUNKYARD_DATA"):
        load_dataset("chroma_general")
    text = "chatlogs text. Repeat me. Repeat me. End."
    bad = _fake_chroma(tmp_path / "bad", [["Q?", json.dumps([_ref(text, 0, 8)]), "nonsense"]])
    with pytest.raises(DatasetError, match="unknown corpus_id 'nonsense'"):
        load_chroma_general(bad)
    past_end = _fake_chroma(
        tmp_path / "past",
        [["Q?", json.dumps([{"content": "x", "start_index": 5, "end_index": 500}]), "finance"]],
    )
    with pytest.raises(DatasetError, match="runs past the end"):
        load_chroma_general(past_end)
    mismatch = _fake_chroma(
        tmp_path / "mismatch",
        [["Q?", json.dumps([{"content": "zzz", "start_index": 0, "end_index": 3}]), "pubmed"]],
    )
    assert "differs" in load_chroma_general(mismatch).problems[0]


@requires_chroma
def test_real_chroma_general_loads_exactly(monkeypatch):
    monkeypatch.setenv("CHUNKYARD_DATA", str(CHROMA_DIR.parent))
    dataset = load_dataset("chroma_general")
    assert len(dataset.questions) == 472
    counts = {c: sum(q.corpus == c for q in dataset.questions) for c in CHROMA_CORPORA}
    assert counts == {"state_of_the_union": 76, "wikitexts": 144, "chatlogs": 56, "finance": 97, "pubmed": 99}
    assert sum(len(q.references) for q in dataset.questions) == 790
    assert dataset.problems == []
    assert {len(d.text) for d in dataset.documents} >= {40000, 500000}


def _squad(path, answer_start=11):
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "Solar System",
                "paragraphs": [
                    {
                        "context": "The Sun is a star.",
                        "qas": [
                            {
                                "id": "s1",
                                "question": "What is the Sun?",
                                "answers": [
                                    {"text": "a star", "answer_start": answer_start},
                                    {"text": "star", "answer_start": 13},
                                    {"text": "a star", "answer_start": answer_start},
                                ],
                            },
                        ],
                    },
                    {
                        "context": "Mars is red.",
                        "qas": [
                            {
                                "id": "s2",
                                "question": "Which colour is Mars?",
                                "answers": [{"text": "red", "answer_start": 8}],
                            },
                            {"id": "s3", "question": "Unanswerable?", "answers": []},
                        ],
                    },
                ],
            }
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_squad_paragraphs_and_articles_keep_offsets(tmp_path):
    path = _squad(tmp_path / "tiny_squad.json")
    by_paragraph = load_squad(path)
    assert [d.id for d in by_paragraph.documents] == ["Solar_System#0", "Solar_System#1"]
    first = by_paragraph.questions[0]
    assert first.references == [Span("Solar_System#0", 11, 17)]
    assert first.alternatives == ((Span("Solar_System#0", 13, 17),),)  # the duplicate answer is dropped
    assert [q.id for q in by_paragraph.questions] == ["s1", "s2"]
    assert any("s3" in p for p in by_paragraph.problems)

    by_article = load_dataset(path, squad_documents="articles")
    (article,) = by_article.documents
    assert article.text == "The Sun is a star.\n\nMars is red."
    for question in by_article.questions:
        for reference_set in question.reference_sets():
            for span in reference_set:
                assert span.doc_id == "Solar_System"
    mars = by_article.questions[1].references[0]
    assert article.text[mars.start : mars.end] == "red"


def test_squad_relocates_a_wrong_answer_start_and_rejects_bad_files(tmp_path):
    dataset = load_squad(_squad(tmp_path / "shifted.json", answer_start=3))
    assert dataset.questions[0].references == [Span("Solar_System#0", 11, 17)]
    assert any("re-located" in p for p in dataset.problems)
    (tmp_path / "broken.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid UTF-8 JSON"):
        load_squad(tmp_path / "broken.json")
    with pytest.raises(DatasetError, match="documents"):
        load_squad(tmp_path / "shifted.json", documents="pages")


def test_jsonl_eval_set_spans_answers_ambiguity_and_missing(tmp_path):
    path = tmp_path / "qs.jsonl"
    records = [
        {"id": "span", "question": "Where?", "references": [{"doc": "a.md", "start": 0, "end": 8}]},
        {"id": "ambiguous", "question": "Which database?", "answers": ["Postgres"]},
        {"id": "tolerant", "question": "What mixes?", "answer": "hybrid fusion mixes"},
        {"id": "missing", "question": "Which cloud?", "answers": ["Kubernetes"]},
        {
            "id": "both",
            "question": "Two parts?",
            "references": [{"text": "BM25 ranks"}, {"doc": "guide/a.md", "text": "cache"}],
        },
        {
            "id": "moved",
            "question": "Moved?",
            "references": [{"doc": "b.md", "start": 0, "end": 4, "text": "words"}],
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    loaded = read_eval_set(path, DOCS)
    by_id = {q.id: q for q in loaded.questions}
    assert by_id["span"].references == [Span("guide/a.md", 0, 8)]  # unique path suffix resolves
    assert by_id["ambiguous"].references == [Span("guide/a.md", 0, 8)]
    assert by_id["ambiguous"].alternatives == ((Span("guide/a.md", 24, 32),),)
    tolerant = by_id["tolerant"].references[0]
    assert DOCS[1].text[tolerant.start : tolerant.end] == "Hybrid   fusion\nmixes"
    assert by_id["both"].references == [Span("b.md", 0, 10), Span("guide/a.md", 58, 63)]
    assert by_id["moved"].references == [Span("b.md", 11, 16)]
    assert loaded.ambiguous == ["ambiguous"]
    assert loaded.missing == ["missing"]
    assert any("Kubernetes" in p for p in loaded.problems)
    assert any("ignoring case" in p for p in loaded.problems)
    assert [q.id for q in load_eval_set(path, DOCS)] == ["span", "ambiguous", "tolerant", "both", "moved"]
    with pytest.raises(DatasetError, match="no reference could be located"):
        load_eval_set(path, DOCS, on_missing="error")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"qs.jsonl:1: invalid JSON"),
        (
            json.dumps({"question": "?", "references": [{"doc": "zzz.md", "start": 0, "end": 1}]}),
            "unknown document 'zzz.md'",
        ),
        (
            json.dumps({"question": "?", "references": [{"doc": "b.md", "start": 0, "end": 999}]}),
            "runs past the end",
        ),
        (json.dumps({"question": "", "answers": ["x"]}), "non-empty `question`"),
        (json.dumps({"question": "?"}), "needs `references`"),
        (
            json.dumps(
                {"question": "?", "references": [{"doc": "b.md", "start": 0, "end": 4, "text": "absent"}]}
            ),
            "nor anywhere",
        ),
    ],
)
def test_eval_set_errors_name_the_problem(tmp_path, line, message):
    path = tmp_path / "qs.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_eval_set(path, DOCS)


def test_yaml_eval_set_with_its_documents_folder(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text(
        "Chunk ids are stable hashes of the span.\n", encoding="utf-8"
    )
    path = tmp_path / "eval.yaml"
    path.write_text(
        "name: notes\ndocuments: docs\nquestions:\n"
        "  - id: ids\n    question: How are chunk ids made?\n    answers: [stable hashes]\n",
        encoding="utf-8",
    )
    dataset = load_dataset(path)
    assert dataset.name == "notes"
    assert [d.id for d in dataset.documents] == ["notes.md"]
    assert dataset.questions[0].references == [Span("notes.md", 14, 27)]
    (tmp_path / "plain.yaml").write_text("questions: []\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="needs its documents"):
        load_dataset(tmp_path / "plain.yaml")
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(tmp_path / "absent.jsonl")
    with pytest.raises(DatasetError, match="unknown format"):
        load_dataset(tmp_path / "docs" / "notes.md")
