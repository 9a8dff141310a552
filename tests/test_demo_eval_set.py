"""The demo collection's hand-written evaluation set points at real spans of the docs."""

import json

from tests.conftest import REPO_ROOT

EVAL_SET = REPO_ROOT / "evaluation" / "datasets" / "demo_questions.jsonl"
DOCS = REPO_ROOT / "docs"


def _questions() -> list[dict]:
    return [json.loads(line) for line in EVAL_SET.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_demo_eval_set_has_at_least_30_unique_questions():
    questions = _questions()
    assert len(questions) >= 30
    assert len({q["id"] for q in questions}) == len(questions)
    assert all(q["question"].strip().endswith("?") for q in questions)


def test_every_reference_span_matches_its_document():
    for question in _questions():
        assert question["references"], question["id"]
        for ref in question["references"]:
            document = (DOCS / ref["document"]).read_text(encoding="utf-8")
            assert 0 <= ref["start"] < ref["end"] <= len(document), question["id"]
            assert document[ref["start"] : ref["end"]] == ref["text"], question["id"]
