"""Every metric computed by hand on small fixtures, and the interval arithmetic checked against
brute-force character sets."""

from __future__ import annotations

import math

import pytest
from chunkyard.evaluation.datasets import Question, Span
from chunkyard.evaluation.estimates import bootstrap_ci
from chunkyard.evaluation.metrics import (
    average_precision_at_k,
    chroma_scores,
    hit_at_k,
    merge_intervals,
    ndcg_at_k,
    recall,
    reciprocal_rank_at_k,
    score_question,
    score_questions,
    summarize,
    take_within_budget,
    union_precision_iou,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Document "a" holds two references: [10, 20) and [30, 40) (20 characters).
REFS = [Span("a", 10, 20), Span("a", 30, 40)]
RETRIEVED = [
    Span("a", 0, 15),  # 5 chars of ref 1
    Span("a", 12, 25),  # 8 chars of ref 1, overlaps the first chunk
    Span("b", 10, 20),  # another corpus: same offsets, no credit
    Span("a", 35, 60),  # 5 chars of ref 2
    Span("a", 80, 90),  # nothing
]


def test_hit_and_mrr_with_min_overlap():
    assert hit_at_k(RETRIEVED, REFS, 5) == 1.0
    assert reciprocal_rank_at_k(RETRIEVED, REFS, 5) == 1.0
    # 6 characters needed: the first chunk (5) no longer counts, the second (8) does.
    assert reciprocal_rank_at_k(RETRIEVED, REFS, 5, min_overlap=6) == 0.5
    assert hit_at_k(RETRIEVED, REFS, 1, min_overlap=6) == 0.0
    # Only the other-corpus chunk and the miss in the top 2 of this order.
    assert reciprocal_rank_at_k([RETRIEVED[2], RETRIEVED[4], RETRIEVED[3]], REFS, 5) == pytest.approx(1 / 3)
    assert hit_at_k([RETRIEVED[2], RETRIEVED[4], RETRIEVED[3]], REFS, 2) == 0.0


def test_ndcg_and_average_precision_by_hand():
    # Relevance of RETRIEVED's top 5 (a chunk overlapping a reference, as for hit@k): 1, 1, 0, 1, 0.
    dcg = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)  # the same 3 relevant chunks first
    assert ndcg_at_k(RETRIEVED, REFS, 5) == pytest.approx(dcg / ideal)
    assert ndcg_at_k(RETRIEVED, REFS, 5) == pytest.approx(0.967468, abs=1e-6)
    # Precision at the relevant ranks 1, 2 and 4: 1/1, 2/2, 3/4; averaged over the 3 relevant.
    assert average_precision_at_k(RETRIEVED, REFS, 5) == pytest.approx((1 + 1 + 3 / 4) / 3)
    assert ndcg_at_k(RETRIEVED, REFS, 2) == average_precision_at_k(RETRIEVED, REFS, 2) == 1.0
    # 6 characters needed: only rank 2 is relevant.
    assert ndcg_at_k(RETRIEVED, REFS, 5, min_overlap=6) == pytest.approx(1 / math.log2(3))
    assert average_precision_at_k(RETRIEVED, REFS, 5, min_overlap=6) == pytest.approx(1 / 2)
    # Two misses, then a relevant chunk at rank 3.
    late = [RETRIEVED[2], RETRIEVED[4], RETRIEVED[3]]
    assert ndcg_at_k(late, REFS, 3) == pytest.approx(1 / math.log2(4))
    assert average_precision_at_k(late, REFS, 3) == pytest.approx(1 / 3)
    assert ndcg_at_k(late, REFS, 2) == average_precision_at_k(late, REFS, 2) == 0.0
    assert ndcg_at_k([], REFS, 5) == average_precision_at_k([], REFS, 5) == 0.0
    scores = score_question(Question("q", "?", REFS), RETRIEVED, k=5, failure_k=0)
    assert scores["ndcg_at_5"] == pytest.approx(dcg / ideal)
    assert scores["map_at_5"] == pytest.approx(2.75 / 3)


def test_recall_precision_iou_union_and_chroma_by_hand():
    # Union of retrieved characters: a:[0,25) + [35,60) + [80,90) = 60, b:[10,20) = 10 -> 70.
    # Covered reference characters: [10,20) fully (10) + [35,40) (5) = 15 of 20.
    assert recall(RETRIEVED, REFS) == pytest.approx(15 / 20)
    precision, iou = union_precision_iou(RETRIEVED, REFS)
    assert precision == pytest.approx(15 / 70)
    assert iou == pytest.approx(15 / (70 + 20 - 15))
    # Chroma: denominator adds chunk lengths 15 + 13 + 10 + 25 + 10 = 73 (the [12,15) overlap twice,
    # the other corpus's chunk too); unused reference characters: [30,35) = 5.
    c_recall, c_precision, c_iou = chroma_scores(RETRIEVED, REFS)
    assert c_recall == pytest.approx(15 / 20)
    assert c_precision == pytest.approx(15 / 73)
    assert c_iou == pytest.approx(15 / (73 + 5))


def test_overlapping_chunks_are_double_counted_only_by_chroma():
    chunks = [Span("a", 0, 20), Span("a", 10, 30)]
    refs = [Span("a", 15, 25)]
    assert union_precision_iou(chunks, refs) == (pytest.approx(10 / 30), pytest.approx(10 / 30))
    c_recall, c_precision, c_iou = chroma_scores(chunks, refs)
    assert (c_recall, c_precision, c_iou) == (1.0, pytest.approx(10 / 40), pytest.approx(10 / 40))


def test_overlapping_references():
    refs = [Span("a", 10, 30), Span("a", 20, 40)]  # union 30 characters, sum 40
    chunks = [Span("a", 25, 35)]
    assert recall(chunks, refs) == pytest.approx(10 / 30)
    assert union_precision_iou(chunks, refs) == (1.0, pytest.approx(10 / 30))
    # Chroma sums reference lengths: recall 10/40; unused = [10,25) 15 + ([20,25)+[35,40)) 10 = 25.
    c_recall, c_precision, c_iou = chroma_scores(chunks, refs)
    assert c_recall == pytest.approx(10 / 40)
    assert c_precision == 1.0
    assert c_iou == pytest.approx(10 / (10 + 25))


def test_zero_hits_and_nothing_retrieved():
    misses = [Span("b", 10, 20), Span("a", 50, 70)]
    assert recall(misses, REFS) == 0.0
    assert union_precision_iou(misses, REFS) == (0.0, 0.0)
    assert chroma_scores(misses, REFS) == (0.0, 0.0, 0.0)
    assert chroma_scores([], REFS) == (0.0, 0.0, 0.0)
    scores = score_question(Question("q", "?", REFS), [], k=5)
    assert scores["hit_at_5"] == scores["mrr_at_5"] == scores["recall_at_5"] == scores["iou_at_5"] == 0.0
    assert scores["failure_rate_at_20"] == 1.0


def test_duplicate_passage_scored_against_the_best_reference_set():
    # The answer text sits at [10,20) and, repeated, at [60,70): either occurrence answers it.
    question = Question("q", "?", [Span("a", 10, 20)], alternatives=((Span("a", 60, 70),),))
    scores = score_question(question, [Span("a", 55, 75), Span("a", 90, 95)], k=2, failure_k=0)
    assert scores["hit_at_2"] == 1.0
    assert scores["recall_at_2"] == 1.0
    assert scores["precision_at_2"] == pytest.approx(10 / 25)
    assert scores["iou_at_2"] == pytest.approx(10 / 25)
    assert scores["chroma_iou_at_2"] == pytest.approx(10 / 25)
    # Without the alternative the same retrieval finds nothing.
    plain = score_question(Question("q", "?", [Span("a", 10, 20)]), [Span("a", 55, 75)], k=1, failure_k=0)
    assert plain["recall_at_1"] == 0.0


def test_score_question_keys_k_and_failure_rate():
    deep = RETRIEVED + [Span("a", 30, 35)] + [Span("c", 0, 5)] * 14  # 20 results
    scores = score_question(Question("q", "?", REFS), deep, k=5, failure_k=20)
    assert scores["recall_at_5"] == pytest.approx(0.75)
    assert scores["recall_at_20"] == 1.0  # rank 6 covers the rest of ref 2
    assert scores["failure_rate_at_20"] == 0.0
    assert scores["chroma_precision_at_5"] == pytest.approx(15 / 73)


def test_budget_recall_takes_chunks_in_rank_order_while_they_fit():
    assert take_within_budget([100, 600, 400, 50], 1024) == 2  # stops at the first that does not fit
    assert take_within_budget([100, 600, 400, 50], 2048) == 4
    assert take_within_budget([2000], 1024) == 0
    question = Question("q", "?", REFS)
    scores = score_question(
        question, RETRIEVED[:4], k=5, token_counts=[300, 800, 10, 10], budgets=(1024, 2048)
    )
    assert scores["budget_chunks_1024"] == 1.0
    assert scores["budget_recall_1024"] == pytest.approx(5 / 20)
    assert scores["budget_chunks_2048"] == 4.0
    assert scores["budget_recall_2048"] == pytest.approx(15 / 20)
    assert scores["context_tokens_at_5"] == 1120.0
    with pytest.raises(ValueError, match="token_counts"):
        score_question(question, RETRIEVED, token_counts=[1])


def test_bootstrap_is_seeded_and_brackets_the_mean():
    values = [0.0, 1.0] * 50
    first = bootstrap_ci(values, seed=7)
    assert first == bootstrap_ci(values, seed=7)
    assert first.mean == 0.5
    assert first.low < 0.5 < first.high
    # Standard error of a mean of 100 fair coin flips is 0.05: the 95% interval is about +-0.1.
    assert 0.07 < first.high - 0.5 < 0.13
    assert bootstrap_ci([0.3] * 10) == bootstrap_ci([0.3] * 10, seed=1)
    assert bootstrap_ci([0.3] * 10).low == pytest.approx(0.3)
    assert math.isnan(bootstrap_ci([]).mean)


def test_summary_overall_and_per_corpus():
    per_question = {"q1": {"m": 1.0}, "q2": {"m": 0.0}, "q3": {"m": 0.5}}
    summary = summarize(per_question, {"q1": "x", "q2": "x", "q3": "y"}, n_resamples=200)
    assert summary.overall["m"].mean == pytest.approx(0.5)
    assert summary.by_corpus["x"]["m"] == 0.5
    assert summary.by_corpus["y"] == {"m": 0.5, "n_questions": 1.0}
    assert summary.as_dict()["n_questions"] == 3


def test_score_questions_uses_token_counter():
    questions = [Question("q1", "?", REFS, corpus="a"), Question("q2", "?", [Span("b", 0, 10)], corpus="b")]
    results = [RETRIEVED, [Span("b", 0, 10)]]
    summary = score_questions(questions, results, k=5, token_counter=lambda s: s.length, budgets=(20,))
    assert summary.per_question["q2"]["budget_recall_20"] == 1.0
    assert summary.per_question["q1"]["budget_chunks_20"] == 1.0  # 15 fits, 15 + 13 does not
    assert summary.overall["hit_at_5"].mean == 1.0
    with pytest.raises(ValueError, match="questions"):
        score_questions(questions, results[:1])


def test_merge_intervals_drops_empty_and_joins_touching():
    assert merge_intervals([(5, 5), (0, 3), (3, 4), (10, 12), (11, 15)]) == [(0, 4), (10, 15)]


spans = st.builds(
    lambda doc, start, length: Span(doc, start, start + length),
    st.sampled_from(["a", "b"]),
    st.integers(0, 60),
    st.integers(0, 25),
)


def _chars(items: list[Span]) -> set[tuple[str, int]]:
    return {(s.doc_id, i) for s in items for i in range(s.start, s.end)}


@settings(max_examples=200, deadline=None)
@given(st.lists(spans, max_size=8), st.lists(spans, min_size=1, max_size=4))
def test_union_metrics_match_brute_force_character_sets(retrieved, references):
    got, refs = _chars(retrieved), _chars(references)
    expected_recall = len(got & refs) / len(refs) if refs else 0.0
    assert recall(retrieved, references) == pytest.approx(expected_recall)
    precision, iou = union_precision_iou(retrieved, references)
    assert precision == pytest.approx(len(got & refs) / len(got) if got else 0.0)
    assert iou == pytest.approx(len(got & refs) / len(got | refs) if got | refs else 0.0)
    c_recall, c_precision, c_iou = chroma_scores(retrieved, references)
    chunk_sum = sum(s.length for s in retrieved)
    unused = sum(len(_chars([r]) - got) for r in references)
    ref_sum = sum(r.length for r in references)
    assert c_recall == pytest.approx(len(got & refs) / ref_sum if ref_sum else 0.0)
    assert c_precision == pytest.approx(len(got & refs) / chunk_sum if chunk_sum else 0.0)
    assert c_iou == pytest.approx(len(got & refs) / (chunk_sum + unused) if chunk_sum + unused else 0.0)
