"""Evaluation: datasets, span metrics, per-index evaluation runs, the leaderboard and `chunkyard eval`.

- `evaluation.datasets`: Span/Question/Dataset, `load_dataset` (Chroma's benchmark, SQuAD, eval sets)
- `evaluation.metrics`: hit@k, MRR@k, character recall/precision/IoU (union and Chroma's), budget
  recall, bootstrap confidence intervals (formulas in docs/metrics.md)
- `evaluation.runner`: `evaluate_index(searcher, spec, questions, EvaluationRequest) -> EvaluationReport`, one
  summary per variant (a search mode, `<mode>+rerank` or `served`)
- `evaluation.reports`: `leaderboard(reports) -> Leaderboard` (markdown, CSV, JSON, PNG)
- `evaluation.tuning`: hybrid fusion weight suggestion with a held-out score
- `evaluation.questions`: a collection's questions (dataset or eval set, minus deleted documents)
"""
