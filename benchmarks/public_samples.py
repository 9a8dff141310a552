"""Small samples of public QA sets as SQuAD v1.1 JSON in evaluation/datasets/ (Chinese, Thai, Indonesian).

Reads the sets' repositories as the `fetch` tool brings them (a bare git directory each) and keeps
the first articles in file order until QUESTIONS questions, with each file's source and licence:

- CMRC2018 dev (ymcui/cmrc2018, CC BY-SA 4.0): SQuAD already;
- iapp-wiki-qa test (iapp-technology/iapp-wiki-qa-dataset, MIT): one JSON line per question;
- FacQA test (IndoNLP/indonlu, Apache-2.0): word lists with B/I labels on the answer, joined with
  spaces here (each passage its own document).

    python -m benchmarks.public_samples MIRROR_ROOT   (the folder holding owner+name git directories)
"""

from __future__ import annotations

import ast
import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "evaluation" / "datasets"
QUESTIONS = 45


def _show(repo: Path, path: str) -> tuple[str, str]:
    """A file of a fetched (bare) repository at HEAD, and HEAD's commit."""
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    text = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True, check=True)
    return text.stdout.decode("utf-8"), commit.stdout.strip()[:12]


def _write(name: str, articles: list[dict[str, Any]], source: str, licence: str) -> None:
    questions = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
    body = {"version": "1.1", "source": source, "license": licence, "data": articles}
    (OUT / name).write_text(json.dumps(body, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{name}: {len(articles)} articles, {questions} questions")


def _first(articles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept, n = [], 0
    for article in articles:
        kept.append(article)
        n += sum(len(p["qas"]) for p in article["paragraphs"])
        if n >= QUESTIONS:
            break
    return kept


def cmrc2018(mirror: Path) -> None:
    text, commit = _show(mirror / "ymcui+cmrc2018" / "repo", "squad-style-data/cmrc2018_dev.json")
    _write(
        "cmrc2018_dev_sample.json",
        _first(json.loads(text)["data"]),
        f"https://github.com/ymcui/cmrc2018 squad-style-data/cmrc2018_dev.json at {commit}, first articles",
        "CC BY-SA 4.0; Cui et al., A Span-Extraction Dataset for Chinese Machine Reading Comprehension, EMNLP 2019",
    )


def iapp_thai(mirror: Path) -> None:
    text, commit = _show(
        mirror / "iapp-technology+iapp-wiki-qa-dataset" / "repo", "squad_format/data/test.jsonl"
    )
    articles: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        row = json.loads(line)
        article = articles.setdefault(row["article_id"], {"title": row["title"], "paragraphs": []})
        paragraph = next((p for p in article["paragraphs"] if p["context"] == row["context"]), None)
        if paragraph is None:
            paragraph = {"context": row["context"], "qas": []}
            article["paragraphs"].append(paragraph)
        answers = row["answers"]
        paragraph["qas"].append(
            {
                "id": row["question_id"],
                "question": row["question"],
                "answers": [
                    {"text": t, "answer_start": s}
                    for t, s in zip(answers["text"], answers["answer_start"], strict=True)
                ],
            }
        )
    _write(
        "iapp_thai_wiki_qa_test_sample.json",
        _first(list(articles.values())),
        f"https://github.com/iapp-technology/iapp-wiki-qa-dataset squad_format/data/test.jsonl at {commit}",
        "MIT; Copyright (c) 2021 iApp Technology Co., Ltd.",
    )


def facqa(mirror: Path) -> None:
    text, commit = _show(
        mirror / "IndoNLP+indonlu" / "repo", "dataset/facqa_qa-factoid-itb/test_preprocess.csv"
    )
    articles = []
    for n, row in enumerate(csv.DictReader(io.StringIO(text))):
        words, labels = ast.literal_eval(row["passage"]), ast.literal_eval(row["seq_label"])
        starts, position = [], 0
        for word in words:
            starts.append(position)
            position += len(word) + 1
        inside = [i for i, label in enumerate(labels) if label in ("B", "I")]
        if not inside:
            continue
        context = " ".join(words)
        start, end = starts[inside[0]], starts[inside[-1]] + len(words[inside[-1]])
        question = " ".join(ast.literal_eval(row["question"]))
        qa = {
            "id": f"facqa-test-{n}",
            "question": question,
            "answers": [{"text": context[start:end], "answer_start": start}],
        }
        articles.append({"title": f"facqa-test-{n:03d}", "paragraphs": [{"context": context, "qas": [qa]}]})
    _write(
        "facqa_test_sample.json",
        _first(articles),
        f"https://github.com/IndoNLP/indonlu dataset/facqa_qa-factoid-itb/test_preprocess.csv at {commit}",
        "Apache-2.0 (the IndoNLU repository); FacQA: Purwarianti et al., ITB",
    )


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(
            "usage: python -m benchmarks.public_samples MIRROR_ROOT (the fetched git directories)"
        )
    mirror = Path(sys.argv[1])
    cmrc2018(mirror)
    iapp_thai(mirror)
    facqa(mirror)


if __name__ == "__main__":
    main()
