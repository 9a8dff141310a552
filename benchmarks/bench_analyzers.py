"""BM25 analyzers side by side on Thai and Ukrainian (and Chinese, Indonesian) questions: lexical only.

Thai: PyThaiNLP's dictionary segmentation (the `thai` analyzer) against character bigrams and
trigrams of every Thai run, and today's `standard` (words cut at vowel signs only). Ukrainian: the
suffix stripper (the `ukrainian` analyzer) against pymorphy3's lemmas (with pymorphy3-dicts-uk),
Snowball's Russian stemmer and no stemming, all with the same stop words. Each set's documents are
cut by the recursive chunker into 400-character chunks (a script-neutral unit, so every analyzer
ranks the same chunks) and ranked by rank-bm25; hit@5 and MRR@5 per analyzer. Writes the
"BM25 analyzers per script" section of benchmarks/results/languages.md and `analyzers.json`.

    python -m benchmarks.bench_analyzers [UNLP_REPO]

UNLP_REPO, the unlp-workshop/unlp-2026-shared-task repository as `fetch` brings it (a bare git
directory), adds its Ukrainian domain_2 dev set: questions over 30 PDF medicine leaflets, each with
the page that answers it, the page's text as the reference span. The repository states no licence,
so none of it is copied into this one; its rows say so.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import regex

from benchmarks.bench_languages import DATA, RESULTS_DIR
from benchmarks.sections import write_section

DATASETS = Path(__file__).resolve().parent.parent / "evaluation" / "datasets"
SECTION = "## BM25 analyzers per script"
_THAI_RUN = regex.compile(r"[\u0e00-\u0e7f]+")


def thai_ngrams(n: int) -> Callable[[str], list[str]]:
    """`standard`'s words, with every Thai run turned into its character n-grams (a short run stays whole)."""
    from chunkyard.retrieval.lexical.analysis import Analyzer

    standard = Analyzer("standard")

    def analyze(text: str) -> list[str]:
        terms: list[str] = []
        for run in _THAI_RUN.findall(text.lower()):
            terms += [run] if len(run) <= n else [run[i : i + n] for i in range(len(run) - n + 1)]
        return terms + standard.analyze(_THAI_RUN.sub(" ", text))

    return analyze


def pymorphy_lemmas() -> Callable[[str], list[str]]:
    """The `ukrainian` analyzer's words and stop words, each word replaced by pymorphy3's first lemma."""
    import pymorphy3
    from chunkyard.retrieval.lexical.analysis import Analyzer

    words = Analyzer("ukrainian", stem=False)
    morph = pymorphy3.MorphAnalyzer(lang="uk")

    @functools.lru_cache(maxsize=100_000)
    def lemma(word: str) -> str:
        return morph.parse(word)[0].normal_form

    return lambda text: [lemma(word) for word in words.analyze(text)]


def candidates(script: str) -> dict[str, Callable[[str], list[str]]]:
    import snowballstemmer
    from chunkyard.retrieval.lexical.analysis import Analyzer

    if script == "thai":
        return {
            "thai (PyThaiNLP newmm)": Analyzer("thai").analyze,
            "character bigrams": thai_ngrams(2),
            "character trigrams": thai_ngrams(3),
            "standard (vowel-sign cuts)": Analyzer("standard").analyze,
        }
    if script == "ukrainian":
        russian = snowballstemmer.stemmer("russian").stemWord
        plain = Analyzer("ukrainian", stem=False)
        return {
            "suffix stripper (ukrainian)": Analyzer("ukrainian").analyze,
            "pymorphy3 lemmas": pymorphy_lemmas(),
            "snowball russian": lambda text: [russian(w) for w in plain.analyze(text)],
            "no stemming": plain.analyze,
        }
    return {"standard": Analyzer("standard").analyze, script: Analyzer(script).analyze}


def datasets() -> list[tuple[str, str, list, list]]:
    """(set, script, documents, questions) of every set measured."""
    from chunkyard.chunking.types import Document
    from chunkyard.evaluation.datasets.evalset import read_eval_set
    from chunkyard.evaluation.datasets.squad import load_squad

    sets = []
    for language, script in (("th", "thai"), ("uk", "ukrainian")):
        documents = [
            Document(p.name, p.read_text(encoding="utf-8")) for p in sorted((DATA / language).glob("*.md"))
        ]
        questions = read_eval_set(
            DATA / f"{language}_questions.jsonl", documents, on_missing="error"
        ).questions
        sets.append((f"{language} (own, tests/data/multilingual)", script, documents, questions))
    for name, script in (("iapp_thai_wiki_qa_test_sample", "thai"), ("facqa_test_sample", "indonesian")):
        data = load_squad(DATASETS / f"{name}.json", documents="articles", name=name)
        sets.append((name, script, data.documents, data.questions))
    return sets


def unlp_set(repo: Path) -> tuple[list, list]:
    """UNLP 2026 dev, domain_2: each PDF a document (pages joined by a blank line), each question the page's span."""
    import csv
    import io
    import subprocess
    import zipfile

    from chunkyard.chunking.types import Document
    from chunkyard.evaluation.datasets.types import Question, Span
    from pypdf import PdfReader

    def show(path: str) -> bytes:
        return subprocess.run(
            ["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True, check=True
        ).stdout

    documents, pages = [], {}
    with zipfile.ZipFile(io.BytesIO(show("data/domain_2/dev.zip"))) as archive:
        for name in sorted(n for n in archive.namelist() if n.endswith(".pdf")):
            texts = [page.extract_text() or "" for page in PdfReader(io.BytesIO(archive.read(name))).pages]
            doc_id, position = Path(name).name, 0
            for number, text in enumerate(texts, start=1):
                pages[(doc_id, number)] = Span(doc_id, position, position + len(text))
                position += len(text) + 2
            documents.append(Document(doc_id, "\n\n".join(texts)))
    questions = [
        Question(
            f"unlp-{row['Question_ID']}", row["Question"], [pages[(row["Doc_ID"], int(row["Page_Num"]))]]
        )
        for row in csv.DictReader(io.StringIO(show("data/dev_questions.csv").decode("utf-8")))
        if row["Domain"] == "domain_2" and (row["Doc_ID"], int(row["Page_Num"])) in pages
    ]
    return documents, questions


def measure(unlp: Path | None = None) -> list[dict[str, object]]:
    from chunkyard.chunking.registry import build_chunker
    from chunkyard.evaluation.datasets.types import Span
    from chunkyard.evaluation.metrics import first_relevant_rank
    from rank_bm25 import BM25Okapi

    chunker = build_chunker({"strategy": "recursive", "size": 400, "overlap": 0, "tokenizer": "chars"})
    rows = []
    sets = datasets()
    if unlp is not None:
        sets.append(
            ("UNLP 2026 dev domain_2 (uk, not copied: no licence stated)", "ukrainian", *unlp_set(unlp))
        )
    for label, script, documents, questions in sets:
        chunks = [chunk for doc in documents for chunk in chunker.chunk(doc)]
        spans = [Span(c.doc_id, c.start, c.end) for c in chunks]
        for name, analyze in candidates(script).items():
            started = time.perf_counter()
            bm25 = BM25Okapi([analyze(c.text) or [""] for c in chunks])
            hits, reciprocal = [], []
            for question in questions:
                scores = bm25.get_scores(analyze(question.text))
                order = sorted(range(len(chunks)), key=lambda i: -scores[i])[:5]
                rank = first_relevant_rank([spans[i] for i in order], question.all_reference_spans())
                hits.append(rank is not None)
                reciprocal.append(1 / rank if rank else 0.0)
            rows.append(
                {
                    "set": label,
                    "analyzer": name,
                    "questions": len(questions),
                    "chunks": len(chunks),
                    "hit_at_5": round(100 * sum(hits) / len(hits), 1),
                    "mrr_at_5": round(sum(reciprocal) / len(reciprocal), 3),
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
            print(rows[-1], flush=True)
    return rows


def write(rows: list[dict[str, object]]) -> None:
    (RESULTS_DIR / "analyzers.json").write_text(
        json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    lines = [
        SECTION,
        "",
        f"`python -m benchmarks.bench_analyzers`, {time.strftime('%Y-%m-%d', time.gmtime())}, 2-core CPU, load "
        f"average {load.split('load average:')[-1].strip()} at the end. BM25 only (rank-bm25), each set's "
        "documents cut by the recursive chunker into 400-character chunks, hit@5 / MRR@5 of the question's "
        "chunk; seconds: analysing the chunks and the questions. Samples of public sets: "
        "evaluation/datasets/*_sample.json (`python -m benchmarks.public_samples`).",
        "",
        "| set | analyzer | questions | chunks | hit@5 | MRR@5 | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['set']} | {row['analyzer']} | {row['questions']} | {row['chunks']} | {row['hit_at_5']} | "
            f"{row['mrr_at_5']} | {row['seconds']} |"
        )
    write_section(RESULTS_DIR / "languages.md", SECTION, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    import sys

    write(measure(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
